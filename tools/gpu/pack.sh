#!/bin/bash
# On the GPU machine: pack /tmp/res (or FROM) into FILE (run.sh and collect.sh end with it): the reports, tables, claims
# files and a row's kept work (task-*.kept.json, end-choice.json), never what an interrupted run resumes from
# there and that would not fit the way back: partial outputs, locks, the jobs' chunks, kept embeddings and a TP
# end-choice's grid of batches (hundreds of MB each; a 1.4 GB archive once took the CPU from the rows).
set -uo pipefail
file=${1:?usage: pack.sh FILE [FROM]}
from=${2:-/tmp/res}
tar --exclude='.*.partial' --exclude='.*.lock' --exclude='job-*' --exclude='embeddings.kept.*' --exclude='grid-*' \
    -C "$from" -czf "$file" .
