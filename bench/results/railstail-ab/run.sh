#!/bin/bash
# The A/B of the runnable-look fix: this tree (margay), main (margay-base, /work/wt/base29), Puma.
cd /work/wt/railstail
for args in "--workers 2 --connections 64" "--workers 2 --connections 256"; do
  echo "== $args start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  flock -o /work/wt/bench.lock bundle exec ruby bench/queue.rb --load wrk --rails $args --rounds 3 --seconds 6 \
    --baseline /work/wt/base29 --results-dir bench/results/railstail-ab
  echo "== $args done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) rc=$?"
done
