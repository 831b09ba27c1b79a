#!/usr/bin/env bash
# The tail at saturation (issue 12 part 4): bench/apps/io.ru (10 ms of waiting
# per request) under more connections than threads, Margay and Puma with
# their default threads (0:5), single process and 2 workers, alternated in
# each round; wrk's p50/p99 and req/s per run. Bounded: ROUNDS x 2 modes x
# 2 servers x (warm-up + one DURATION-second run per connection count).
#
#   bench/tail.sh [RESULTS_FILE]      (ROUNDS=3 DURATION=10 CONNS="64 256" by default)
set -u
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNS=${CONNS:-"64 256"}
out=${1:-bench/results/tail-latest.txt}
mkdir -p "$(dirname "$out")"
: > "$out"
app=bench/apps/io.ru

start_server() { # server mode port -> pid
  local workers=""
  [ "$2" = w2 ] && workers="-w 2"
  if [ "$1" = margay ]; then
    BUNDLE_GEMFILE=$PWD/Gemfile bundle exec exe/margay -s -b "tcp://127.0.0.1:$3" -e production $workers $app >/dev/null 2>&1 &
  else
    BUNDLE_GEMFILE=$PWD/bench/Gemfile bundle exec puma -q -b "tcp://127.0.0.1:$3" -e production -t 0:5 $workers $app >/dev/null 2>&1 &
  fi
  echo $!
}

port=19400
for round in $(seq 1 "$ROUNDS"); do
  for mode in single w2; do
    for server in margay puma; do
      port=$((port + 1))
      pid=$(start_server "$server" "$mode" "$port")
      for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
      timeout 30 wrk -t1 -c64 -d3s "http://127.0.0.1:$port/" >/dev/null 2>&1 # warm-up, discarded
      for c in $CONNS; do
        res=$(timeout $((DURATION + 30)) wrk -t1 -c"$c" -d"${DURATION}s" --timeout 10s --latency "http://127.0.0.1:$port/" 2>&1)
        rps=$(echo "$res" | awk '/Requests\/sec/ {print $2}')
        p50=$(echo "$res" | awk '$1=="50%" {print $2}')
        p99=$(echo "$res" | awk '$1=="99%" {print $2}')
        errors=$(echo "$res" | grep -E "Socket errors|Non-2xx" | tr '\n' ' ')
        echo "round=$round mode=$mode server=$server c=$c rps=$rps p50=$p50 p99=$p99 $errors" | tee -a "$out"
      done
      kill -TERM "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      pkill -f "127.0.0.1:$port" 2>/dev/null
      sleep 1
    done
  done
done
