#!/bin/bash
# Stop 25's quiet window: Margay = /work/wt/integ (main + this stop's branches), margay-base = /work/wt/base25 (main at 72d2696).
set -u
cd /work/wt/integ
R=/work/wt/integ/bench/results
Q=$R/queue-20261127-run3
q() { echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): bench/queue.rb $*"; flock /work/wt/bench.lock timeout 1200 bundle exec ruby bench/queue.rb "$@" --results-dir $Q 2>&1 | grep -E "per round|per worker|^\| [0-9]"; }
q --load ab --rounds 5 --baseline /work/wt/base25
q --load wrk --connections 64 --workers 4 --rounds 3 --baseline /work/wt/base25
q --load wrk --connections 256 --rounds 3
q --load ab --rounds 3 --rails
q --load wrk --connections 64 --rounds 3 --rails
q --load arrival --rounds 2 --rails --max-rate 400 --probes 7 --seconds 5
echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): bench/core.rb"
flock /work/wt/bench.lock timeout 1500 bundle exec ruby bench/core.rb --scenarios hello --connections 64,256 --rounds 3 --duration 6 --servers margay,margay-base,iodine,nginx --baseline /work/wt/base25 --results-dir $R/core-20261127-speed 2>&1 | tail -25
echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): bench/handshakes.rb"
flock /work/wt/bench.lock timeout 1500 bundle exec ruby bench/handshakes.rb --rounds 2 --seconds 5 --idle 10000 --results-dir $R/handshakes-20261127 2>&1 | grep -v "^\[handshakes\]" | tail -30
echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): bench/jruby.rb"
flock /work/wt/bench.lock timeout 1500 bundle exec ruby bench/jruby.rb --rounds 2 --seconds 8 --warmup 8 --results-dir $R/jruby-20261127 2>&1 | tail -20
echo "== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
