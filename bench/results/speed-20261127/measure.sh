#!/bin/sh
# measure.sh TREE PORT [REQS] [cpu]: TREE's margay, single process, 5 threads, bench/apps/hello.ru on
# 127.0.0.1:PORT, warmed with 20,000 keep-alive requests, then counted over exactly REQS
# keep-alive requests (ab -k -c 16): CPU time (utime and stime of /proc/PID/stat) and syscalls
# (tracepoints), printed per request. The uprobes cost far more than the request itself: CPU
# time is read from a run without perf (4th argument "cpu"), the counts from one with it. No hardware counters on this VM (perf stat reports
# instructions and cycles as not supported), so no instruction counts. malloc, calloc and free are counted through uprobes, made once with
#   perf probe -x /lib/x86_64-linux-gnu/libc.so.6 malloc   (and calloc, free)
set -e
TREE=$1; PORT=$2; N=${3:-100000}
cd "$TREE"
bundle exec exe/margay -b tcp://127.0.0.1:$PORT -t 5 bench/apps/hello.ru >/tmp/measure-$PORT.log 2>&1 &
PID=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$PORT/ && break; sleep 0.2; done
ab -q -k -n 20000 -c 16 http://127.0.0.1:$PORT/ >/dev/null 2>&1
SC=syscalls:sys_enter_
cpu() { sed 's/.*) //' /proc/$PID/stat | awk '{print $12, $13}'; }
B=$(cpu)
if [ "$4" = cpu ]; then ab -q -k -n $N -c 16 http://127.0.0.1:$PORT/ > /tmp/ab-$PORT.txt 2>&1; : > /tmp/perf-$PORT.txt; else
perf stat -x, -o /tmp/perf-$PORT.txt -p $PID -e probe_libc:malloc,probe_libc:calloc,probe_libc:free,${SC}epoll_ctl,${SC}epoll_wait,${SC}epoll_pwait,${SC}read,${SC}recvfrom,${SC}recvmsg,${SC}write,${SC}writev,${SC}sendto,${SC}sendmsg,${SC}futex,${SC}mmap,${SC}munmap,${SC}madvise,${SC}brk \
  -- ab -q -k -n $N -c 16 http://127.0.0.1:$PORT/ > /tmp/ab-$PORT.txt 2>&1
fi
A=$(cpu)
kill -TERM $PID; wait $PID 2>/dev/null || true
FAILED=$(awk '/^Failed requests/{print $3}' /tmp/ab-$PORT.txt)
echo "$B $A" | awk -v n=$N '{printf "user_us/req=%.2f sys_us/req=%.2f ", ($3-$1)*10000/n, ($4-$2)*10000/n}'
awk -F, -v n=$N -v f="$FAILED" -v t="$TREE" '
  /probe_libc:/{name=$3; sub("probe_libc:","",name); m = m sprintf(" %s=%.3f", name, $1/n)}
  /syscalls:sys_enter_/{name=$3; sub("syscalls:sys_enter_","",name); if ($1+0 > 0) { s = s sprintf(" %s=%.3f", name, $1/n); tot += $1 } }
  END{printf "%s n=%d failed=%s libc/req:%s syscalls/req=%.3f:%s\n", t, n, f, m, tot/n, s}' /tmp/perf-$PORT.txt
