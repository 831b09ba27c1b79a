#!/bin/bash
# strace -f -c of a margay server (TREE, SCHEME) under wrk -t2 -c64 -d5s; prints requests and syscalls
TREE=$1; PORT=$2; SCHEME=${3:-https}; TAG=$4
cd $TREE
if [ "$SCHEME" = https ]; then BIND="ssl://127.0.0.1:$PORT?cert=/tmp/tls11/cert.pem&key=/tmp/tls11/key.pem"; else BIND="tcp://127.0.0.1:$PORT"; fi
bundle exec exe/margay -b "$BIND" -e production -q bench/apps/hello.ru > /tmp/tls11/srv.log 2>&1 &
PID=$!
for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.2; done
SRV=$(pgrep -P $PID -f margay || echo $PID)
wrk -t2 -c64 -d2s $SCHEME://127.0.0.1:$PORT/ >/dev/null
strace -f -c -o /tmp/tls11/s64.$TAG.txt -p $SRV &
SP=$!
sleep 1
wrk -t2 -c64 -d5s $SCHEME://127.0.0.1:$PORT/ | grep -E "requests in"
sleep 0.5
kill -INT $SP; wait $SP
kill $PID; wait $PID 2>/dev/null
head -14 /tmp/tls11/s64.$TAG.txt
