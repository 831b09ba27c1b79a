#!/bin/bash
# GC.stat before and after 6 s of wrk -t2 -c256 on gc_check.ru, one process, fiber mode then
# thread mode; the app tallies GC.latest_gc_info(:major_by) of each full GC it sees.
# Run under the bench lock: flock -o /work/wt/bench.lock bash gc_check.sh [modes...]
cd "$(dirname "$0")/../../.." || exit 1
modes=${*:-fibers threads}
for mode in $modes; do
  flag=$([ $mode = fibers ] && echo --fibers || echo "-t 5:5")
  bundle exec exe/margay -b tcp://127.0.0.1:19561 -e production -q -w 0 $flag bench/results/fibertail-probe/gc_check.ru > /tmp/ft_gc_$mode.out 2>&1 &
  pid=$!
  for i in $(seq 1 40); do curl -s -o /dev/null http://127.0.0.1:19561/ && break; sleep 0.25; done
  curl -s http://127.0.0.1:19561/gc; echo
  wrk -t2 -c256 -d6s http://127.0.0.1:19561/ | grep -E "Req|99%"
  echo "$mode after:"; curl -s http://127.0.0.1:19561/gc; echo
  kill $pid; wait $pid
done
