#!/bin/bash
# Stage what a lent GPU machine needs to run the tables (tools/gpu/README.md).
#
#   bash tools/gpu/stage.sh smollm2-135m-instruct beir sts senteval
#   bash tools/gpu/stage.sh qwen2.5-coder-0.5b-instruct cmteb        # also carries mteb and what it needs
#
# The machine reaches no package index and takes 64 MiB of working tree a call, so this writes, in the
# ignored folder .dev/ (add "/.dev/" to .git/info/exclude), folders .dev/gpu-1, .dev/gpu-2, ..., each small
# enough to travel beside the checkout, packed from:
#   - the wheels missing from its image: gguf, pysbd, pytrec-eval-terrier; with the data folder mteb or
#     cmteb, also mteb and the packages it needs that the image lacks (polars' runtime alone is 54 MB);
#   - the named data folders of ../shared/data, as data.tar.xz;
#   - the model's GGUF in parts as large as a call carries, with its name and sha256.
# The parts are as large as a call carries beside the working tree, so a tree narrowed to what the run reads
# (tools/gpu/README.md: `git sparse-checkout set ...`) takes fewer calls.
# Carry .dev/gpu-1 in the first call, .dev/gpu-2 ... in the next ones (back to back: a machine idle for
# 30 s is given back, and /tmp with it); each call runs `bash tools/gpu/receive.sh .dev/gpu-K` first. The
# folders may arrive in any order; run.sh checks that every part is there.
set -euo pipefail
model=${1:?usage: stage.sh MODEL [DATA_FOLDER ...]}; shift
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
gguf=$("$python" -c "from minidecoder.sources.registry import ensure_gguf; print(ensure_gguf('$model'))")
rm -rf "$root/.dev" && mkdir -p "$root/.dev/items/whl"

# The image's Python is 3.12 (device/KINDS.md); these are the versions the tests here run against.
wheels="gguf==0.19.0 pysbd==0.3.4 pytrec-eval-terrier==0.5.11"
case " $* " in
    *" mteb "*|*" cmteb "*)  # mteb's dependencies minus the image's packages (device/KINDS.md lists them)
        wheels="$wheels mteb==2.26.24 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 polars==2.1.0
                polars-runtime-32==2.1.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
                typing-inspection==0.4.5" ;;
esac
# shellcheck disable=SC2086  # one argument a wheel
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$root/.dev/items/whl" $wheels

shared=${MINIDECODER_SHARED_DATA:-$root/../shared/data}
[ $# -gt 0 ] && tar -C "$shared" -cJf "$root/.dev/items/data.tar.xz" "$@"
basename "$gguf" > "$root/.dev/items/gguf.name"
sha256sum "$gguf" | cut -d' ' -f1 > "$root/.dev/items/gguf.sha256"
# Parts as large as a call carries beside the checkout (64 MiB travel in all, a MiB to spare): the fewer the
# parts, the fewer the calls, and a checkout that grows (results/ rows) shrinks them instead of breaking.
# What travels is the tracked files present in the working tree and the untracked ones git does not ignore
# (a tracked file removed from the tree for a sitting stays behind).
checkout=$(cd "$root" && git ls-files -z --cached --others --exclude-standard \
    | "$python" -c "import os, sys; print(sum(os.path.getsize(p) for p in sys.stdin.read().split('\\0') if os.path.isfile(p)))")
part_mib=$(( 63 - (checkout + 2**20 - 1) / 2**20 ))
[ "$part_mib" -ge 8 ] || { echo "the checkout is $((checkout / 2**20)) MiB: too large to carry parts beside it"; exit 2; }
split -b "${part_mib}M" -d -a 2 "$gguf" "$root/.dev/items/gguf.part"

# First fit, largest first, into folders that fit a call beside the checkout.
"$python" - "$root/.dev" "$checkout" <<'EOF'
import sys
from pathlib import Path

dev, checkout = Path(sys.argv[1]), int(sys.argv[2])
limit, folders = 63 * 2**20 - checkout, []  # a MiB to spare; [free bytes, [items]]
for item in [p for p in (dev / "items").rglob("*") if p.is_file() and p.stat().st_size > limit]:
    # a wheel larger than a call (polars' runtime, 54 MB) travels as pieces that receive.sh joins
    data = item.read_bytes()
    pieces = range(0, len(data), limit)
    for number, start in enumerate(pieces):
        item.with_name(f"{item.name}.piece{number:02d}").write_bytes(data[start:start + limit])
    item.with_name(f"{item.name}.pieces").write_text(f"{len(pieces)}\n")
    item.unlink()
items = sorted((p for p in (dev / "items").rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
for item in items:
    size = item.stat().st_size
    home = next((f for f in folders if f[0] >= size), None)
    if home is None:
        folders.append(home := [limit, []])
    home[0] -= size
    home[1].append(item)
for k, (_, placed) in enumerate(folders, start=1):
    (dev / f"gpu-{k}").mkdir()
    (dev / f"gpu-{k}" / f"folder-{k}-of-{len(folders)}").touch()  # run.sh checks that all arrived
    for item in placed:
        target = dev / f"gpu-{k}" / item.relative_to(dev / "items")
        target.parent.mkdir(parents=True, exist_ok=True)
        item.rename(target)
EOF
rm -rf "$root/.dev/items"
du -sh "$root"/.dev/gpu-*
echo "calls: $(ls -d "$root"/.dev/gpu-* | wc -l), each carrying one of: $(cd "$root" && ls -d .dev/gpu-* | tr '\n' ' ')"
