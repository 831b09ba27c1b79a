#!/bin/bash
# usage: strace.sh TREE PORT SCHEME  -> strace -f -c of a margay server over 20000 keep-alive requests from h2load --h1 -c1
TREE=$1; PORT=$2; SCHEME=${3:-https}
cd $TREE
if [ "$SCHEME" = https ]; then BIND="ssl://127.0.0.1:$PORT?cert=/tmp/tls11/cert.pem&key=/tmp/tls11/key.pem"; else BIND="tcp://127.0.0.1:$PORT"; fi
bundle exec exe/margay -b "$BIND" -e production -q -t 1:1 bench/apps/hello.ru > /tmp/tls11/srv.log 2>&1 &
PID=$!
for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.2; done
SRV=$(pgrep -P $PID -f margay || echo $PID)
h2load --h1 -n 200 -c 1 -m 1 $SCHEME://127.0.0.1:$PORT/ >/dev/null 2>&1
strace -f -c -o /tmp/tls11/strace.$SCHEME.$(basename $TREE).txt -p $SRV &
SP=$!
sleep 1
h2load --h1 -n 20000 -c 1 -m 1 $SCHEME://127.0.0.1:$PORT/ | grep -E "requests:|finished in"
sleep 0.5
kill -INT $SP; wait $SP
kill $PID; wait $PID 2>/dev/null
grep -E "calls|read|recv|write|send|epoll|total" /tmp/tls11/strace.$SCHEME.$(basename $TREE).txt
