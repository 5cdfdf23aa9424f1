"""Fast paths: each one speeds up code it sits beneath and is tested equal to the plain path.

    plan            the decisions for one batch, made on the host, as data (`Plan`)
    forward         the executor: `FastForward`, the plain loop's `Forward` carrying out a plan
    device          host-to-device moves from pinned memory, without blocking

    prefix_cache    a prompt template's shared prefix run once, reused through the KV cache
    compiled        torch.compile of Block.forward (elementwise work fused)
    packed          linear weights reordered once into oneDNN's layout (CPU)
    blocked_fusion  ReBA's fused attention matrix one head at a time (peak memory grows with T^2 once)
    attention       which attention kernel a block call uses (explicit matmul-softmax-matmul or SDPA)

The core and the methods can be read without opening this folder: the plain block loop
(`minidecoder.methods.loop`) imports nothing from it. `plan` alone decides whether one of these applies,
from the model's `FastPaths` and what a method's step declares; `forward.FastForward` runs beneath the
loop (it subclasses `Forward`) and is tested equal to it for every method.
"""
