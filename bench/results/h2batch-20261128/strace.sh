#!/bin/bash
# strace.sh TREE MODE TAG
TREE=$1; MODE=$2; TAG=$3; PORT=$((20000 + RANDOM % 1000))
PID=$(/tmp/h2batch/start.sh $TREE $MODE $PORT | head -1)
sleep 1
SCHEME=https; [ $MODE = h2c ] && SCHEME=http
timeout 60 h2load -n 20000 -c 64 -m ${M:-100} -t2 $SCHEME://127.0.0.1:$PORT/ > /dev/null
RPID=$(pgrep -P $PID -f margay || echo $PID)
TASKS=$(ls /proc/$PID/task | sed 's/^/-p /' | tr '\n' ' ')
timeout 120 strace -f -c -o /tmp/h2batch/strace-$TAG.txt $TASKS &
SP=$!; sleep 1
timeout 90 h2load -n 200000 -c 64 -m ${M:-100} -t2 $SCHEME://127.0.0.1:$PORT/ > /tmp/h2batch/h2load-strace-$TAG.txt
kill -INT $SP; wait $SP
timeout 120 strace -f -e trace=read,write,recvfrom,sendto,sendmsg,recvmsg,writev,readv -o /tmp/h2batch/trace-$TAG.txt $TASKS &
SP=$!; sleep 1
timeout 90 h2load -n 20000 -c 64 -m ${M:-100} -t2 $SCHEME://127.0.0.1:$PORT/ > /dev/null
kill -INT $SP; wait $SP
kill -TERM -- -$PID; sleep 1
