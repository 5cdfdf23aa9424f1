#!/bin/bash
# On the GPU machine, once every part is received: assemble and check the GGUF, convert it with
# minidecoder's own converter, unpack the data, then run each argument as a command (within T seconds in
# all, default 400) and pack /tmp/res (reports, tables, claims files, and a transfer row's finished tasks,
# task-*.kept.json and end-choice.json, so a row the time limit stopped resumes in the next sitting; pack.sh
# leaves out the chunks and grids, hundreds of MB) into $OUT/res.tgz.
#
#   T=400 bash tools/gpu/run.sh \
#     "python3 tools/reproduce_retrieval.py --family retrieval --device cuda --out /tmp/res/retrieval --results /tmp/res/results" \
#     "python3 tools/reproduce_tasks.py --family sts-long --device cuda --out /tmp/res/results"
set -uo pipefail
stage=${STAGE:-/tmp/stage}  # the folder receive.sh filled
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD MINIDECODER_CACHE=/tmp/mdcache MINIDECODER_WEIGHTS=/tmp/mdweights
# Several table jobs share the machine's 16 cores (background.sh): torch's default of a thread per core in each
# oversubscribes them (`uptime` shows it), and the host side (tokenizing, launching kernels) is what paces a
# small model's batches. The probes are unaffected: each of their workers runs on one thread.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
end=$((SECONDS + ${T:-400}))
folders=$(ls "$stage" | sed -n 's/^folder-[0-9]*-of-\([0-9]*\)$/\1/p' | head -1)
received=$(ls "$stage" | grep -c '^folder-[0-9]*-of-' || true)
[ -n "$folders" ] && [ "$received" = "$folders" ] \
    || { echo "received $received of ${folders:-?} staged folders: run receive.sh for each .dev/gpu-K first"; exit 3; }
name=$(cat "$stage/gguf.name")
mkdir -p /tmp/mdcache/gguf /tmp/data /tmp/res/results
cat "$stage"/gguf.part* > "/tmp/mdcache/gguf/$name"
[ "$(sha256sum "/tmp/mdcache/gguf/$name" | cut -d' ' -f1)" = "$(cat "$stage/gguf.sha256")" ] \
    || { echo "the assembled GGUF's sha256 differs: a part is missing"; exit 3; }
[ -f "$stage/data.tar.xz" ] && tar -C /tmp/data -xJf "$stage/data.tar.xz"
for set in beir sts senteval mteb cmteb; do
    [ -d "/tmp/data/$set" ] && export "MINIDECODER_$(echo $set | tr a-z A-Z)_DATA=/tmp/data/$set"
done
model=$(python3 -c "
from minidecoder.sources.registry import KNOWN_MODELS, ensure_model, get
name = next(n for n in KNOWN_MODELS if get(n).gguf_file == '$name')
print(ensure_model(name, progress=False))") || exit 4
echo "converted: $model"
for command in "$@"; do
    left=$((end - SECONDS - 20))
    [ $left -gt 10 ] || { echo "out of time before: $command"; break; }
    echo "== $command"
    timeout $left bash -c "$command" 2>&1 | grep -v "UserWarning\|vectors = embed" | tee -a "$OUT/run.log"
done
bash "$(dirname "$0")/pack.sh" "$OUT/res.tgz"
ls -la "$OUT"
