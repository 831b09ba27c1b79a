#!/bin/bash
cd /work/wt/integ
echo "== start $(date -u +%T) $(cat /proc/loadavg)"
flock -o /work/wt/bench.lock bundle exec ruby bench/queue_bars.rb --baseline /work/wt/base28 --results-dir bench/results/queue-20261127-run7 > /work/wt/s28/run7.log 2>&1
echo "rc=$?"
echo "== done $(date -u +%T) $(cat /proc/loadavg)"
