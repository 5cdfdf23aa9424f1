#!/bin/bash
# On the GPU machine: wait for every run tools/gpu/background.sh started (at most WAIT seconds, default 500),
# then pack /tmp/res (the rows, as run.sh packs them) and the runs' logs into $OUT. A row still running at
# the deadline is left out (its partial files are skipped); the table tools resume it in a later sitting.
set -uo pipefail
deadline=$((SECONDS + ${WAIT:-500}))
for pidfile in /tmp/*.pid; do
    [ -e "$pidfile" ] || continue
    while kill -0 "$(cat "$pidfile")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 2; done
done
echo "waited $SECONDS s"
bash "$(dirname "$0")/pack.sh" "$OUT/res.tgz"
for pidfile in /tmp/*.pid; do  # each background run's log
    [ -e "$pidfile" ] || continue
    log=${pidfile%.pid}.log
    cp "$log" "$OUT/" && tail -n 30 "$log"
done
ls -la "$OUT"
