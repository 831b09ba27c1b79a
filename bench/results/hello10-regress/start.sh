# start.sh, sourced by counts.sh, profile.sh and sched.sh: start_warm TREE PORT NAME starts
# TREE's margay (-e production -q, as bench/core.rb; default threads; bench/apps/hello.ru) on
# 127.0.0.1:PORT, logging to /tmp/NAME-PORT.log, waits until it answers, and warms it with 20,000
# keep-alive requests (ab -k -c 64). Sets PID (the process started) and SPID (the server's).
start_warm() {
  cd "$1"
  bundle exec exe/margay -b tcp://127.0.0.1:$2 -e production -q bench/apps/hello.ru >/tmp/$3-$2.log 2>&1 &
  PID=$!
  for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$2/ && break; sleep 0.2; done
  SPID=$(pgrep -P $PID -f margay || echo $PID)
  [ -d /proc/$SPID ] || SPID=$PID
  ab -q -k -n 20000 -c 64 http://127.0.0.1:$2/ >/dev/null 2>&1
}
