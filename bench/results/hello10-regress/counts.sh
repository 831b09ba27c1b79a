#!/bin/sh
# counts.sh TREE PORT [REQS] [cpu|wrk|wrkcpu]: TREE's margay (-e production -q, as bench/core.rb), single process, default threads,
# bench/apps/hello.ru on 127.0.0.1:PORT, warmed with 20,000 keep-alive requests (ab -k -c 64),
# then exactly REQS keep-alive requests (ab -k -c 64): with "cpu" the server's CPU time per
# request (utime, stime of /proc/PID/stat; no perf attached), otherwise
# allocator calls and syscalls per request (below); "wrk" and "wrkcpu": the same with
# `wrk -t2 -c64 -d5s` as the load (per request of wrk's count) in place of ab; otherwise allocator calls
# (uprobes made once with `perf probe -x /lib/x86_64-linux-gnu/libc.so.6 malloc`, and calloc,
# realloc, free) and syscalls (tracepoints) per request.
set -e
TREE=$1; PORT=$2; N=${3:-50000}
. "$(dirname "$(readlink -f "$0")")/start.sh"
start_warm "$TREE" $PORT counts
SC=syscalls:sys_enter_
cpu() { sed 's/.*) //' /proc/$SPID/stat | awk '{print $12, $13}'; }
B=$(cpu)
LOAD="ab -q -k -n $N -c 64 http://127.0.0.1:$PORT/"
case "$4" in wrk*) LOAD="wrk -t2 -c64 -d5s http://127.0.0.1:$PORT/";; esac
if [ "$4" = cpu ] || [ "$4" = wrkcpu ]; then $LOAD > /tmp/ab-$PORT.txt 2>&1; : > /tmp/perf-$PORT.txt; else
perf stat -x, -o /tmp/perf-$PORT.txt -p $SPID -e probe_libc:malloc,probe_libc:calloc,probe_libc:realloc,probe_libc:free,raw_syscalls:sys_enter,${SC}epoll_ctl,${SC}epoll_wait,${SC}epoll_pwait,${SC}read,${SC}recvfrom,${SC}recvmsg,${SC}write,${SC}writev,${SC}sendto,${SC}sendmsg,${SC}futex,${SC}mmap,${SC}munmap,${SC}madvise,${SC}brk,${SC}clock_gettime,${SC}getpid,${SC}rt_sigprocmask \
  -- $LOAD > /tmp/ab-$PORT.txt 2>&1
fi
A=$(cpu)
kill -TERM $PID; wait $PID 2>/dev/null || true
FAILED=$(awk '/^Failed requests/{print $3}' /tmp/ab-$PORT.txt)
RPS=$(awk '/^Requests per second/{print $4} /^Requests\/sec/{print $2}' /tmp/ab-$PORT.txt)
case "$4" in wrk*) N=$(awk '/requests in/{print $1}' /tmp/ab-$PORT.txt);; esac
echo "$B $A" | awk -v n=$N '{printf "user_us/req=%.2f sys_us/req=%.2f ", ($3-$1)*10000/n, ($4-$2)*10000/n}'
awk -F, -v n=$N -v f="$FAILED" -v t="$TREE" -v r="$RPS" '
  /probe_libc:/{name=$3; sub("probe_libc:","",name); m = m sprintf(" %s=%.3f", name, $1/n)}
  /raw_syscalls:sys_enter/{tot=$1}
  /syscalls:sys_enter_/{name=$3; sub("syscalls:sys_enter_","",name); if ($1+0 > 0) { s = s sprintf(" %s=%.3f", name, $1/n) } }
  END{printf "%s n=%d failed=%s ab_rps=%s libc/req:%s syscalls/req=%.3f:%s\n", t, n, f, r, m, tot/n, s}' /tmp/perf-$PORT.txt
