#!/bin/bash
# On a lent GPU machine (docs/benchmarks.md, "GPU benchmark"): the CUDA tests, then tools/bench.py --device cuda
# in two runs sharing one checkpoint, generation first (the last section, the first a tight budget would drop),
# then every other section within what is left of TOTAL seconds (default 570). Carry .gpu (the tokenizer and
# sts-test.csv) and .whl (pysbd, gguf); writes its logs and JSON to $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 3
export PYTHONUNBUFFERED=1
nvidia-smi -L; python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
start=$SECONDS
timeout 150 python3 -m pytest -q -p no:cacheprovider -m "not real and not slow" -k "cuda or gpu" \
    tests/fast/test_fused.py tests/fast/test_device_parity.py tests/fast/test_graph_bank.py tests/fast/test_graphs.py \
    tests/fast/test_devices_and_threads.py tests/core/test_generation.py 2>&1 | tail -25 | tee $OUT/cuda_tests.txt
echo "tests took $((SECONDS - start)) s"
B="python3 tools/bench.py --device cuda --tokenizer .gpu --sts .gpu/sts-test.csv --work /tmp/ckpt"
timeout 200 $B --skip throughput,floor,gpu_busy,sync,methods,reba_batch --json $OUT/bench_gen.json 2>&1 | tee $OUT/bench_gen.txt
left=$((${TOTAL:-570} - SECONDS - 30))
echo "budget for the rest: $left s"
timeout $((left + 25)) $B --skip generation --budget-s $((left - 40)) --repeat 2 --json $OUT/bench_gpu.json 2>&1 | tee $OUT/bench_gpu.txt
echo "all took $SECONDS s"
