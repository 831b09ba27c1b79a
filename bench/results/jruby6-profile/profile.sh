#!/usr/bin/env bash
# usage: profile2.sh TREE OUTDIR WARMUP_S PROFILE_S [server: margay|puma] [app]
# JFR starts with the JVM (delayed to the end of the warm-up), not attached.
set -u
tree=$1 out=$2 warm=$3 prof=$4 server=${5:-margay} app=${6:-bench/apps/hello.ru}
mkdir -p "$out"
port=$((20000 + RANDOM % 20000))
cd "$tree"
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
export _JAVA_SR_SIGNUM=60
# boot takes ~12 s: recording starts after boot + warm-up
export JAVA_TOOL_OPTIONS="${JTO:-} -XX:StartFlightRecording=delay=$((warm + 14))s,duration=${prof}s,filename=$out/rec.jfr,settings=${JFRSET:-profile}"
if [ "$server" = margay ]; then
  MARGAY_JRUBY_GEMFILE=bench/jruby.gemfile .ci/jruby exe/margay -b tcp://127.0.0.1:$port -e production -q -t 16:16 $app > "$out/server.log" 2>&1 &
else
  MARGAY_JRUBY_GEMFILE=bench/jruby.gemfile .ci/jruby -S puma -b tcp://127.0.0.1:$port -e production -C - -q -t 16:16 $app > "$out/server.log" 2>&1 &
fi
pid=$!
unset JAVA_TOOL_OPTIONS
t0=$(date +%s)
for i in $(seq 1 180); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 1; done
echo "up after $(( $(date +%s) - t0 ))s" >> "$out/log"
wrk -t2 -c64 -d${warm}s http://127.0.0.1:$port/ > "$out/wrk-warm.txt" 2>&1
wrk -t2 -c64 -d$((prof + 6))s --latency http://127.0.0.1:$port/ > "$out/wrk-prof.txt" 2>&1 &
w=$!
sleep $((prof / 2))
top -b -H -n 1 -d 2 -p $pid | head -45 > "$out/top.txt"
wait $w
sleep 1
kill $pid; wait $pid
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
