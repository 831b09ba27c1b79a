#!/bin/sh
# threads.sh TREE PORT [SECONDS] [MARGAY_ARGS]: TREE's margay (-e production -q, bench/apps/hello.ru)
# under `wrk -t2 -c64 -dSECONDS` (8) with no warm-up (as bench/core.rb's runs: fresh server);
# every second: the server's thread count, context switches (voluntary+involuntary, all threads)
# and CPU ticks per thread that ran; then wrk's requests.
set -e
TREE=$1; PORT=$2; S=${3:-8}; shift 3 || true
cd "$TREE"
bundle exec exe/margay -b tcp://127.0.0.1:$PORT -e production -q "$@" bench/apps/hello.ru >/tmp/threads-$PORT.log 2>&1 &
PID=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$PORT/ && break; sleep 0.2; done
wrk -t2 -c64 -d${S}s http://127.0.0.1:$PORT/ > /tmp/threads-$PORT.wrk 2>&1 &
W=$!
snap() { for t in /proc/$PID/task/*; do printf "%s:%s:%s:%s " "$(cat $t/comm)" "$(awk '{print $14+$15}' $t/stat)" "$(awk '/^voluntary_ctxt/{print $2}' $t/status)" "$(awk '/^nonvoluntary_ctxt/{print $2}' $t/status)"; done; echo; }
for i in $(seq $S); do sleep 1; printf "t=%s " $i; snap; done
wait $W
kill -TERM $PID; wait $PID 2>/dev/null || true
grep -E "requests in|Requests/sec" /tmp/threads-$PORT.wrk
