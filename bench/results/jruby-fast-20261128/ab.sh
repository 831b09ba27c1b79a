#!/bin/bash
# A/B on one tree: MARGAY_PURE_FAST=1 vs 0, alternating, fresh JVM each, 60 s warm-up, 8 s measured.
cd /work/wt/jx
for r in 1 2 3; do
  for f in $( [ $((r % 2)) = 1 ] && echo "1 0" || echo "0 1"); do
    port=$((20000 + RANDOM % 20000))
    MARGAY_PURE_FAST=$f MARGAY_JRUBY_GEMFILE=bench/jruby.gemfile setsid .ci/jruby exe/margay -b tcp://127.0.0.1:$port -e production -q -t 16:16 bench/apps/hello.ru > /tmp/ab-$f.log 2>&1 &
    pid=$!
    for i in $(seq 1 120); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 1; done
    wrk -t2 -c64 -d60s http://127.0.0.1:$port/ > /dev/null
    echo "round $r FAST=$f $(wrk -t2 -c64 -d8s --latency http://127.0.0.1:$port/ | grep -E 'Requests/sec|99%' | tr -s ' ' | tr '\n' ' ')"
    kill -TERM -- -$pid 2>/dev/null; kill $pid 2>/dev/null; wait $pid 2>/dev/null
  done
done
