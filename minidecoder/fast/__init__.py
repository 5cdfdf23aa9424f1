"""Fast paths: each one speeds up code it sits beneath and is tested equal to the plain path.

    prefix_cache    a prompt template's shared prefix run once, reused through the KV cache
    compiled        torch.compile of Block.forward (elementwise work fused)
    packed          linear weights reordered once into oneDNN's layout (CPU)
    blocked_fusion  ReBA's fused attention matrix one head at a time (peak memory grows with T^2 once)
    attention       which attention kernel a block call uses (explicit matmul-softmax-matmul or SDPA)

The core and the methods can be read without opening this folder: the shared block loop
(`minidecoder.methods.loop`) is the only place that decides whether one of these applies.
"""
