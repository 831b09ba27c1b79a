#!/bin/sh
# profile.sh TREE PORT OUT [SECONDS] [WRK_THREADS]: TREE's margay (-e production -q, default threads,
# bench/apps/hello.ru), warmed with 20,000 keep-alive requests (ab -k -c 64), then sampled
# with `perf record -e cpu-clock -F 4000 -g` over `wrk -tWRK_THREADS -c64 -dSECONDS` (5 s, 1 thread): OUT.data,
# OUT.wrk (wrk's output), OUT.txt (perf report by symbol, self time).
set -e
TREE=$1; PORT=$2; OUT=$3; S=${4:-5}; WT=${5:-1}
. "$(dirname "$(readlink -f "$0")")/start.sh"
start_warm "$TREE" $PORT profile
perf record -q -e cpu-clock -F 4000 -g -o $OUT.data -p $SPID -- wrk -t$WT -c64 -d${S}s http://127.0.0.1:$PORT/ > $OUT.wrk 2>&1
kill -TERM $PID; wait $PID 2>/dev/null || true
perf report -i $OUT.data --no-children --sort dso,sym --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | grep "%" | head -80 > $OUT.txt
awk '/requests in/{print "requests", $1}' $OUT.wrk
perf report -i $OUT.data --no-children -g none --sort dso --stdio 2>/dev/null | grep "%" | head -12
