#!/bin/sh
# callgrind.sh TREE PORT OUT [REQS]: TREE's margay (-e production -q, default threads,
# bench/apps/hello.ru) under `valgrind --tool=callgrind` (instructions executed in user space,
# deterministic where CPU time on this shared VM is not), warmed with 3,000 keep-alive requests
# (ab -k -c 16), counters zeroed, then exactly REQS (5,000) keep-alive requests (ab -k -c 16)
# and a dump: OUT (callgrind.out), its summary line Ir per request printed. With WRK=1 in the
# environment the counted load is `wrk -t1 -c16 -d20s` instead (its request has only Host:, as
# bench/core.rb's), and REQS is wrk's count.
set -e
TREE=$1; PORT=$2; OUT=$3; N=${4:-5000}
cd "$TREE"
BUNDLE_GEMFILE=$TREE/Gemfile valgrind --tool=callgrind --callgrind-out-file=$OUT.%p --dump-instr=no \
  ruby -rbundler/setup exe/margay -b tcp://127.0.0.1:$PORT -e production -q bench/apps/hello.ru >/tmp/cg-$PORT.log 2>&1 &
PID=$!
for i in $(seq 300); do curl -s -o /dev/null http://127.0.0.1:$PORT/ && break; sleep 0.5; done
ab -q -k -n 3000 -c 16 http://127.0.0.1:$PORT/ >/dev/null 2>&1
callgrind_control -z $PID >/dev/null
if [ -n "$WRK" ]; then
  wrk -t1 -c16 -d20s http://127.0.0.1:$PORT/ > /tmp/cg-ab-$PORT.txt 2>&1
  N=$(awk '/requests in/{print $1}' /tmp/cg-ab-$PORT.txt)
else
  ab -q -k -n $N -c 16 http://127.0.0.1:$PORT/ > /tmp/cg-ab-$PORT.txt 2>&1
fi
callgrind_control -d $PID >/dev/null
kill -TERM $PID; wait $PID 2>/dev/null || true
F=$(ls -t $OUT.$PID.* 2>/dev/null | head -1)
[ -n "$F" ] || F=$(ls -t $OUT.$PID* | head -1)
echo "$TREE requests=$N failed=$(awk '/^Failed requests/{print $3}' /tmp/cg-ab-$PORT.txt) file=$F"
callgrind_annotate $F 2>/dev/null | awk -v n=$N '/PROGRAM TOTALS/{gsub(",","",$1); printf "Ir/req=%.0f\n", $1/n}'
