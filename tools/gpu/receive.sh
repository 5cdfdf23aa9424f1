#!/bin/bash
# On the GPU machine: keep one carried folder of tools/gpu/stage.sh's in /tmp/stage (it lasts while the
# machine is held), installing its wheels into /tmp/site; says which GGUF parts are there so far.
set -euo pipefail
from=${1:?usage: receive.sh .dev/gpu-K}
mkdir -p /tmp/stage && cp -r "$from"/. /tmp/stage/
if [ -d "$from/whl" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$from"/whl/*.whl
fi
{ ls /tmp/stage | grep gguf.part || true; } | tr '\n' ' '; echo  # a folder of wheels alone holds no part yet
