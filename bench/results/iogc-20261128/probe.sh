#!/bin/bash
# probe.sh WORKERS SECONDS OUTDIR [extra margay args...]: bench/apps/io.ru inside ioprobe.ru, on
# this tree's Margay started as bench/queue.rb starts it for the wrk-W-C rows (the project's
# bundle, -e production -q -w WORKERS -t 0:5, the control app), under wrk -t2 -c${CONNS:-64}
# for SECONDS once every worker runs; sampler.rb alongside (100 ms). OUTDIR: gc/ (per worker
# lines), wrk.txt, samples.jsonl, uptime.txt, server.log. Run from the tree's root, under the
# bench lock.
set -eu
workers=$1; secs=$2; out=$3; shift 3
tree=$(pwd)
here=$tree/bench/results/iogc-20261128
app=${APP:-$here/ioprobe.ru}
mkdir -p "$out/gc"; rm -f "$out"/gc/*.jsonl
port=$(ruby -rsocket -e 's=TCPServer.new("127.0.0.1",0); p s.addr[1]')
cport=$(ruby -rsocket -e 's=TCPServer.new("127.0.0.1",0); p s.addr[1]')
export GC_PROBE_DIR=$out/gc
cmd=(bundle exec "$tree/exe/margay" -b tcp://127.0.0.1:$port -e production -q -w "$workers" -t 0:5
     --control-url tcp://127.0.0.1:$cport --control-token none "$@" "$app")
echo "${cmd[*]}" > "$out/command.txt"
setsid "${cmd[@]}" >"$out/server.log" 2>&1 &
pid=$!
spid=
trap 'kill -TERM $spid 2>/dev/null || true; kill -TERM -- -$pid 2>/dev/null || true; sleep 1; kill -KILL -- -$pid 2>/dev/null || true' EXIT
for i in $(seq 1 120); do
  n=$(ps -o pid= -g $pid | wc -l)
  [ "$n" -gt "$workers" ] && curl -sf -o /dev/null http://127.0.0.1:$port/ && break
  sleep 0.5
done
uptime > "$out/uptime.txt"
date +%s.%N > "$out/start.txt"
wrk -t2 -c${CONNS:-64} -d${secs}s --timeout 10s --latency -s bench/wrk/report.lua http://127.0.0.1:$port/ > "$out/wrk.txt" &
wpid=$!
ruby "$here/sampler.rb" $pid $cport "$out/samples.jsonl" $wpid &
spid=$!
wait $wpid
kill -TERM $spid; wait $spid 2>/dev/null || true
sleep 1.2
uptime >> "$out/uptime.txt"
