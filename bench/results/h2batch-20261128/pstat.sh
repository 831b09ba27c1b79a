#!/bin/bash
# pstat.sh TREE MODE M TAG: syscall counts by perf stat (tracepoints) over -n 200000
TREE=$1; MODE=$2; M=$3; TAG=$4; PORT=$((24000 + RANDOM % 1000))
PID=$(/tmp/h2batch/start.sh $TREE $MODE $PORT | head -1)
sleep 1
SCHEME=https; [ $MODE = h2c ] && SCHEME=http
timeout 60 h2load -n 20000 -c 64 -m $M -t2 $SCHEME://127.0.0.1:$PORT/ > /dev/null
C0=$(awk '{print $14+$15}' /proc/$PID/stat)
timeout 100 perf stat -e syscalls:sys_enter_write,syscalls:sys_enter_sendmsg,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,sched:sched_switch -p $PID -o /tmp/h2batch/pstat-$TAG.txt &
SP=$!; sleep 0.5
R=$(timeout 90 h2load -n 200000 -c 64 -m $M -t2 $SCHEME://127.0.0.1:$PORT/ | grep -oP 'finished in \S+ \K[0-9.]+')
C1=$(awk '{print $14+$15}' /proc/$PID/stat)
kill -INT $SP; wait $SP
echo "$TAG $R req/s cpu_us_per_req $(echo "($C1-$C0)*10000/200000" | bc -l | cut -c1-5)"
grep -E "syscalls|sched" /tmp/h2batch/pstat-$TAG.txt | awk '{printf "   %s %s\n", $2, $1}'
kill -TERM -- -$PID; sleep 1
