#!/bin/bash
# Stop 27's quiet run: Margay = /work/main as merged at this stop; margay-base = /work/wt/base27 (519ecf2, main at this stop's start). No helper runs.
set -u
cd /work/main
R=/work/main/bench/results
b() { echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; flock -o /work/wt/bench.lock timeout 2400 bundle exec ruby "$@" 2>&1 | grep -vE "^\[(queue|h2)\]" ; }
b bench/queue_bars.rb --baseline /work/wt/base27 --results-dir $R/queue-20261127-run6
[ -n "${H2:-}" ] && b bench/h2.rb --rounds 2 --seconds 6 --keys ecdsa --results-dir $R/h2-20261127-s27
echo "== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
