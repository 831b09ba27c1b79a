#!/bin/sh
# strace.sh TREE PORT OUT [REQS]: TREE's margay (-e production -q, bench/apps/hello.ru) warmed
# with 2,000 keep-alive requests (ab -k -c 16), then `strace -f -c -p` on every thread of it
# during exactly REQS (5,000) keep-alive requests (ab -k -c 16): OUT, the syscall counts.
set -e
TREE=$1; PORT=$2; OUT=$3; N=${4:-5000}
cd "$TREE"
BUNDLE_GEMFILE=$TREE/Gemfile ruby -rbundler/setup exe/margay -b tcp://127.0.0.1:$PORT -e production -q bench/apps/hello.ru >/tmp/st-$PORT.log 2>&1 &
PID=$!
for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$PORT/ && break; sleep 0.2; done
ab -q -k -n 2000 -c 16 http://127.0.0.1:$PORT/ >/dev/null 2>&1
strace -f -c -o $OUT -p $PID &
SPID=$!
sleep 1
ab -q -k -n $N -c 16 http://127.0.0.1:$PORT/ > /tmp/st-ab-$PORT.txt 2>&1
sleep 0.5
kill -INT $SPID; wait $SPID 2>/dev/null || true
kill -TERM $PID; wait $PID 2>/dev/null || true
echo "$TREE requests=$N failed=$(awk '/^Failed requests/{print $3}' /tmp/st-ab-$PORT.txt)"
cat $OUT
