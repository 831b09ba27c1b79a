#!/bin/bash
# server CPU µs per request and req/s under wrk -t2 -c64 -d8s: TREE PORT SCHEME
TREE=$1; PORT=$2; SCHEME=${3:-https}; shift 3
cd $TREE
if [ "$SCHEME" = https ]; then BIND="ssl://127.0.0.1:$PORT?cert=/tmp/tls11/cert.pem&key=/tmp/tls11/key.pem"; else BIND="tcp://127.0.0.1:$PORT"; fi
bundle exec exe/margay -b "$BIND" -e production -q "$@" bench/apps/hello.ru > /tmp/tls11/srv.log 2>&1 &
PID=$!
for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.2; done
SRV=$(pgrep -P $PID -f margay || echo $PID)
wrk -t2 -c64 -d2s $SCHEME://127.0.0.1:$PORT/ >/dev/null
T0=$(awk '{print $14+$15}' /proc/$SRV/stat)
CS0=$(grep ctxt /proc/$SRV/status | awk '{s+=$2} END {print s}')
OUT=$(wrk -t2 -c64 -d8s $SCHEME://127.0.0.1:$PORT/)
T1=$(awk '{print $14+$15}' /proc/$SRV/stat)
N=$(echo "$OUT" | awk '/requests in/ {print $1}')
RPS=$(echo "$OUT" | awk '/Requests\/sec/ {print $2}')
echo "$(basename $TREE) $SCHEME $* rps=$RPS cpu_us_per_req=$(echo "($T1-$T0)*10000/$N" | bc -l | cut -c1-6)"
kill $PID; wait $PID 2>/dev/null
