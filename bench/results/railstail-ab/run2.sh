#!/bin/bash
# The c=64 A/B again, without this branch's own tests running beside it.
cd /work/wt/railstail
echo "== --workers 2 --connections 64 start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
flock -o /work/wt/bench.lock sh -c 'echo "locked $(date -u +%T) load $(cut -d" " -f1-3 /proc/loadavg)"; bundle exec ruby bench/queue.rb --load wrk --rails --workers 2 --connections 64 --rounds 3 --seconds 6 --baseline /work/wt/base29 --results-dir bench/results/railstail-ab'
echo "== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) rc=$?"
