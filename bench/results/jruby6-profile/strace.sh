#!/usr/bin/env bash
# usage: strace.sh TREE OUTDIR WARM_S [margay|puma]
set -u
tree=$1 out=$2 warm=$3 server=${4:-margay}
mkdir -p "$out"; cd "$tree"
port=$((20000 + RANDOM % 20000))
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
if [ "$server" = margay ]; then
  MARGAY_JRUBY_GEMFILE=bench/jruby.gemfile .ci/jruby exe/margay -b tcp://127.0.0.1:$port -e production -q -t 16:16 bench/apps/hello.ru > "$out/server.log" 2>&1 &
else
  MARGAY_JRUBY_GEMFILE=bench/jruby.gemfile .ci/jruby -S puma -b tcp://127.0.0.1:$port -e production -C - -q -t 16:16 bench/apps/hello.ru > "$out/server.log" 2>&1 &
fi
pid=$!
for i in $(seq 1 180); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 1; done
wrk -t2 -c64 -d${warm}s http://127.0.0.1:$port/ > "$out/wrk-warm.txt" 2>&1
read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u0 s0 _ < /proc/$pid/stat
wrk -t2 -c64 -d10s http://127.0.0.1:$port/ > "$out/wrk-cpu.txt" 2>&1
read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u1 s1 _ < /proc/$pid/stat
echo "server cpu over 10 s: user $((u1 - u0)) sys $((s1 - s0)) ticks (100/s)" >> "$out/log"
wrk -t2 -c64 -d12s http://127.0.0.1:$port/ > "$out/wrk-strace.txt" 2>&1 &
w=$!
sleep 1
timeout 10 strace -f -c -p $pid -o "$out/strace.txt" 2>/dev/null
wait $w
kill $pid; wait $pid
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
