#!/bin/bash
# Stage what a lent GPU machine needs to run the tables (results/README.md, "Tables on a lent GPU").
#
#   bash tools/gpu/stage.sh smollm2-135m-instruct beir sts senteval
#
# The machine reaches no package index and takes 64 MiB of working tree a call, so this writes, in the
# ignored folder .dev/ (add "/.dev/" to .git/info/exclude):
#   .dev/gpu-1/   the wheels missing from its image (gguf, pysbd, pytrec-eval-terrier), the named data
#                 folders of ../shared/data as data.tar.xz, GGUF part 1
#   .dev/gpu-N/   GGUF part N (44 MB each)
# Carry .dev/gpu-1 in the first call, .dev/gpu-2 ... in the next ones (back to back: a machine idle for
# 30 s is given back, and /tmp with it); each call runs `bash tools/gpu/receive.sh .dev/gpu-K` first.
set -euo pipefail
model=${1:?usage: stage.sh MODEL [DATA_FOLDER ...]}; shift
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
gguf=$("$python" -c "from minidecoder.sources.registry import ensure_gguf; print(ensure_gguf('$model'))")
rm -rf "$root/.dev" && mkdir -p "$root/.dev/gpu-1/whl"
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$root/.dev/gpu-1/whl" gguf==0.19.0 pysbd==0.3.4 pytrec-eval-terrier==0.5.11
shared=${MINIDECODER_SHARED_DATA:-$root/../shared/data}
[ $# -gt 0 ] && tar -C "$shared" -cJf "$root/.dev/gpu-1/data.tar.xz" "$@"
basename "$gguf" > "$root/.dev/gpu-1/gguf.name"
sha256sum "$gguf" | cut -d' ' -f1 > "$root/.dev/gpu-1/gguf.sha256"
split -b 44M -d -a 2 "$gguf" "$root/.dev/gguf.part"
k=1
for part in "$root"/.dev/gguf.part*; do
    mkdir -p "$root/.dev/gpu-$k" && mv "$part" "$root/.dev/gpu-$k/"
    k=$((k + 1))
done
du -sh "$root"/.dev/gpu-*
echo "calls: $(ls -d "$root"/.dev/gpu-* | wc -l), each carrying one of: $(cd "$root" && ls -d .dev/gpu-* | tr '\n' ' ')"
