#!/bin/bash
# Stop 26, run 5: Margay = /work/main (d15b4af, the same code as run 4), margay-base = /work/wt/base26 (0b5f55b).
set -u
cd /work/main
R=/work/main/bench/results
Q=$R/queue-20261127-run5
mkdir -p $Q
cp "$0" $Q/run5.sh
q() { echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): bench/queue.rb $*"; flock -o /work/wt/bench.lock timeout 1200 bundle exec ruby bench/queue.rb "$@" --results-dir $Q 2>&1 | grep -E "per round|per worker|^\| [0-9]"; }
q --load ab --rounds 5 --baseline /work/wt/base26
q --load wrk --connections 256 --rounds 3
q --load wrk --connections 64 --workers 4 --rounds 3
q --load ab --rounds 3 --rails --baseline /work/wt/base26
q --load wrk --connections 64 --rounds 3 --rails
q --load arrival --rounds 2 --rails --max-rate 400 --probes 7 --seconds 5
q --load wrk --connections 256 --rounds 2 --app bench/apps/hello.ru --baseline /work/wt/base26
echo "== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
