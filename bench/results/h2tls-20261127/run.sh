#!/bin/bash
# run.sh TREE MODE M [N]  -> one fresh server, h2load -c64 -mM -D10 warm-up 2
TREE=$1; MODE=$2; M=$3; PORT=$((22000 + RANDOM % 1000))
PID=$(/tmp/h2tls/start.sh $TREE $MODE $PORT | head -1)
SCHEME=https; [ $MODE = h2c ] && SCHEME=http
OUT=$(timeout 60 h2load -c 64 -m $M -t2 -D 10 --warm-up-time 2 $SCHEME://127.0.0.1:$PORT/)
RPID=$(pgrep -f "margay.*$PORT" | head -1)
CPU=$(awk '{print $14+$15}' /proc/$PID/stat)
echo "$(basename $TREE) $MODE m$M $(echo "$OUT" | grep -oP 'finished in \S+ \K[0-9.]+(?= req/s)') req/s  $(echo "$OUT" | grep -P '^time for request' | awk '{print "min",$4,"max",$5,"mean",$6}') cpu_ticks $CPU"
kill -TERM -- -$PID; sleep 1
