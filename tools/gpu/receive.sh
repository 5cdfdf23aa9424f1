#!/bin/bash
# On the GPU machine: keep one carried folder of tools/gpu/stage.sh's in $STAGE, default /tmp/stage (it lasts while the
# machine is held), installing its wheels into /tmp/site; says which GGUF parts are there so far.
set -euo pipefail
stage=${STAGE:-/tmp/stage}  # STAGE=/tmp/stage-2 receives a second model in the same sitting
from=${1:?usage: receive.sh .dev/gpu-K}
mkdir -p "$stage/whl" && cp -r "$from"/. "$stage/"
# A wheel larger than one call came in pieces (stage.sh): join it once every piece has arrived.
for count in "$stage"/whl/*.pieces; do
    [ -e "$count" ] || continue
    wheel=${count%.pieces}
    pieces=("$wheel".piece[0-9][0-9])  # not .pieces, the count
    if [ "${#pieces[@]}" = "$(cat "$count")" ]; then
        cat "${pieces[@]}" > "$wheel" && rm "${pieces[@]}" "$count"
    fi
done
fresh=()
for wheel in "$stage"/whl/*.whl; do  # each whole wheel once, whichever call brought it
    [ -e "$wheel" ] && [ ! -e "$wheel.installed" ] && fresh+=("$wheel")
done
if [ ${#fresh[@]} -gt 0 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${fresh[@]}"
    for wheel in "${fresh[@]}"; do touch "$wheel.installed"; done
fi
{ ls "$stage" | grep gguf.part || true; } | tr '\n' ' '; echo  # a folder of wheels alone holds no part yet
