#!/bin/bash
# probe.sh SERVER SECONDS OUTDIR [extra server args...]: the Rails bench app with gcprobe.ru
# (or $APP), 2 workers, -t 0:5, under wrk -t2 -c64 for SECONDS (as bench/queue.rb's
# wrk-rails-2-64 row); per-worker GC lines in OUTDIR/gc, wrk's output in OUTDIR/wrk.txt, each
# process's PSS/RSS after the load in OUTDIR/pss.txt.
# Run from the tree's root, under the bench lock.
set -eu
server=$1; secs=$2; out=$3; shift 3
tree=$(pwd)
app=${APP:-$tree/bench/results/railsgc-20261128/gcprobe.ru}
mkdir -p "$out/gc"; rm -f "$out"/gc/*.jsonl
port=$(ruby -rsocket -e 's=TCPServer.new("127.0.0.1",0); p s.addr[1]')
export BUNDLE_GEMFILE=$tree/bench/Gemfile RACK_ENV=production RAILS_ENV=production
export BENCH_RAILS_DB=${BENCH_RAILS_DB:-/tmp/railsgc-rails.sqlite3} GC_PROBE_DIR=$out/gc
case $server in
  margay) cmd=(bundle exec "${MARGAY_EXE:-$tree/exe/margay}" -b tcp://127.0.0.1:$port -e production -q -w 2 -t 0:5 "$@" "$app") ;;
  puma)   cmd=(bundle exec puma -b tcp://127.0.0.1:$port -e production -C - -q -w 2 -t 0:5 "$@" "$app") ;;
esac
setsid "${cmd[@]}" >"$out/server.log" 2>&1 &
pid=$!
trap 'kill -TERM -- -$pid 2>/dev/null || true; sleep 1; kill -KILL -- -$pid 2>/dev/null || true' EXIT
for i in $(seq 1 120); do
  n=$(ps -o pid= --ppid $pid | wc -l)
  curl -sf -o /dev/null http://127.0.0.1:$port/ && [ "$n" -ge 2 ] && break
  sleep 0.5
done
# as bench/queue.rb: the load begins once both workers run; the probe's first curl is inside
uptime > "$out/uptime.txt"
wrk -t2 -c64 -d${secs}s --timeout 10s --latency -s bench/wrk/report.lua http://127.0.0.1:$port/ > "$out/wrk.txt"
sleep 1.5
# PSS and RSS (KiB) of each process of the server's group after the load (master, workers)
for p in $(ps -o pid= -g $pid); do
  [ -r /proc/$p/smaps_rollup ] && echo "$p $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-60) $(awk '/^Pss:/{pss=$2} /^Rss:/{rss=$2} END{print "pss_kib=" pss, "rss_kib=" rss}' /proc/$p/smaps_rollup)"
done > "$out/pss.txt" 2>/dev/null || true
