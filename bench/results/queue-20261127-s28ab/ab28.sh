#!/bin/bash
# Quiet A/B of the queue7 change (integ) against main before it (/work/wt/base28) and Puma.
cd /work/wt/integ
echo "== start $(date -u +%T) $(cat /proc/loadavg)"
flock -o /work/wt/bench.lock bundle exec ruby bench/queue.rb --load wrk --rails --workers 2 --connections 64 --rounds 3 --seconds 6 --baseline /work/wt/base28 --results-dir bench/results/queue-20261127-s28ab 2>&1 | grep -E "^\| [0-9]|per round|p99 ratio|^wrk"
echo "== io $(date -u +%T) $(cat /proc/loadavg)"
flock -o /work/wt/bench.lock bundle exec ruby bench/queue.rb --load wrk --workers 4 --connections 64 --rounds 3 --seconds 6 --baseline /work/wt/base28 --results-dir bench/results/queue-20261127-s28ab 2>&1 | grep -E "^\| [0-9]|per round|p99 ratio|^wrk"
echo "== done $(date -u +%T) $(cat /proc/loadavg)"
