#!/bin/bash
# On the GPU machine: tools/gpu/run.sh in the background, so that the next calls can receive a second model's
# folders while this model's rows run. Each call sends the working tree again, so it runs from a copy.
#
#   STAGE=/tmp/stage-2 T=500 bash tools/gpu/background.sh NAME "COMMAND" ...
#
# NAME's log is /tmp/NAME.log; tools/gpu/collect.sh waits for every background run and packs the rows.
set -euo pipefail
name=${1:?usage: background.sh NAME COMMAND ...}; shift
copy=/tmp/repo-$name
rm -rf "$copy" && mkdir -p "$copy" "/tmp/out-$name" /tmp/res/results
# what the table tools read: the code and the committed tables (their claims files)
cp -r minidecoder reproduce tools pyproject.toml "$copy"/
mkdir -p "$copy/results" && find results -maxdepth 1 -type f -exec cp {} "$copy/results/" \;
cd "$copy"
OUT=/tmp/out-$name setsid nohup bash tools/gpu/run.sh "$@" > "/tmp/$name.log" 2>&1 < /dev/null &
echo $! > "/tmp/$name.pid"
echo "started $name (pid $!), log /tmp/$name.log"
