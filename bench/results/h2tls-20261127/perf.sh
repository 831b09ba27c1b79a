#!/bin/bash
# perf.sh TREE MODE TAG
TREE=$1; MODE=$2; TAG=$3; PORT=$((21000 + RANDOM % 1000))
PID=$(/tmp/h2tls/start.sh $TREE $MODE $PORT | head -1)
sleep 1
SCHEME=https; [ $MODE = h2c ] && SCHEME=http
timeout 60 h2load -n 20000 -c 64 -m ${M:-100} -t2 $SCHEME://127.0.0.1:$PORT/ > /dev/null
timeout 100 perf record -g -o /tmp/h2tls/perf-$TAG.data -p $PID 2>/dev/null &
SP=$!; sleep 1
timeout 90 h2load -n 200000 -c 64 -m ${M:-100} -t2 $SCHEME://127.0.0.1:$PORT/ > /tmp/h2tls/h2load-perf-$TAG.txt
kill -INT $SP; wait $SP
cat /proc/$PID/stat | awk '{print "utime",$14,"stime",$15}' > /tmp/h2tls/cpu-$TAG.txt
kill -TERM -- -$PID; sleep 1
