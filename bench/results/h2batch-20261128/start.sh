#!/bin/bash
# start.sh TREE MODE PORT  -> prints pid; MODE tls|h2c
TREE=$1; MODE=$2; PORT=$3
cd $TREE
if [ $MODE = tls ]; then B="ssl://127.0.0.1:$PORT?cert=/tmp/h2batch/ec.crt&key=/tmp/h2batch/ec.key&http2=true"; else B="tcp://127.0.0.1:$PORT?http2=true"; fi
setsid bundle exec exe/margay -b "$B" -e production -q -C /tmp/h2batch/conf.rb $TREE/bench/apps/hello.ru >/tmp/h2batch/server-$MODE.log 2>&1 &
echo $!
for i in $(seq 100); do ss -ltn | grep -q ":$PORT " && break; sleep 0.1; done
