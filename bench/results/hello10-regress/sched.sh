#!/bin/sh
# sched.sh TREE PORT [WRK_THREADS] [SECONDS]: TREE's margay (-e production -q, default threads,
# bench/apps/hello.ru), warmed with 20,000 keep-alive requests (ab -k -c 64), then
# `perf stat -e cpu-clock,task-clock,context-switches,cpu-migrations` on the server over
# `wrk -tWRK_THREADS -c64 -dSECONDS` (1, 5): requests, server CPU ms, switches per request.
set -e
TREE=$1; PORT=$2; WT=${3:-1}; S=${4:-5}
. "$(dirname "$(readlink -f "$0")")/start.sh"
start_warm "$TREE" $PORT sched
perf stat -x, -o /tmp/sched-$PORT.txt -e task-clock,context-switches,cpu-migrations -p $SPID -- wrk -t$WT -c64 -d${S}s http://127.0.0.1:$PORT/ > /tmp/sched-$PORT.wrk 2>&1
kill -TERM $PID; wait $PID 2>/dev/null || true
N=$(awk '/requests in/{print $1}' /tmp/sched-$PORT.wrk)
awk -F, -v n=$N -v t=$TREE -v wt=$WT '{v[$3]=$1} END{printf "%s wrk -t%s: requests=%d task_ms=%.0f us/req=%.2f cs/req=%.3f migr/req=%.4f\n", t, wt, n, v["task-clock"], v["task-clock"]*1000/n, v["context-switches"]/n, v["cpu-migrations"]/n}' /tmp/sched-$PORT.txt
