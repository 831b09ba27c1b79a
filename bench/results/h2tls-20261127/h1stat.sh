#!/bin/bash
# h1stat.sh TREE tls|plain TAG: wrk -t2 -c64 -d8, syscalls by perf stat, CPU per request
TREE=$1; MODE=$2; TAG=$3; PORT=$((25000 + RANDOM % 1000))
cd $TREE
if [ $MODE = tls ]; then B="ssl://127.0.0.1:$PORT?cert=/tmp/h2tls/ec.crt&key=/tmp/h2tls/ec.key"; S=https; else B="tcp://127.0.0.1:$PORT"; S=http; fi
setsid bundle exec exe/margay -b "$B" -e production -q $TREE/bench/apps/hello.ru >/tmp/h2tls/h1-$TAG.log 2>&1 &
PID=$!
for i in $(seq 100); do ss -ltn | grep -q ":$PORT " && break; sleep 0.1; done
wrk -t2 -c64 -d2 $S://127.0.0.1:$PORT/ >/dev/null
C0=$(awk '{print $14+$15}' /proc/$PID/stat)
timeout 100 perf stat -e syscalls:sys_enter_write,syscalls:sys_enter_sendmsg,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_recvmsg,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_writev -p $PID -o /tmp/h2tls/h1stat-$TAG.txt &
SP=$!; sleep 0.3
T0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
OUT=$(wrk -t2 -c64 -d8 $S://127.0.0.1:$PORT/)
T1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
C1=$(awk '{print $14+$15}' /proc/$PID/stat)
kill -INT $SP; wait $SP
N=$(echo "$OUT" | grep -oP '^\s*\K\d+(?= requests in)')
echo "$TAG $(echo "$OUT" | grep Requests/sec) requests $N cpu_us_per_req $(echo "($C1-$C0)*10000/$N" | bc -l | cut -c1-5) wrk_cpu_us_per_req $(echo "($T1-$T0)*10000/$N" | bc -l | cut -c1-5)"
grep -E "syscalls" /tmp/h2tls/h1stat-$TAG.txt | awk -v n=$N '{printf "   %s %s (%.2f/req)\n", $2, $1, $1/n}' | sed 's/,//g'
kill -TERM -- -$PID; sleep 1
