#!/bin/bash
# usage: run.sh TREE "REPS" (e.g. "1 2"): the Rails probe runs on Ruby 3.3, each replayed by sim.rb
cd $1
BUNDLE_WITHOUT=peers:plugins MARGAY_RUBY33_TIMEOUT=1800 flock -o /work/wt/bench.lock .ci/ruby33 bash -c "
 { date -u; uptime; ruby -v; } ; bundle exec rake compile >/dev/null 2>&1
 mkdir -p /var/tmp/railsfloor
 for rep in $2; do
  for wc in '2 64' '2 256' '4 64' '4 256'; do set -- \$wc
   echo \"== w\$1 c\$2 rep \$rep \$(date -u +%T) load \$(cut -d' ' -f1 /proc/loadavg)\"
   ruby bench/results/railstail-probe/run.rb margay w\$1c\$2r\$rep \$1 \$2 15 | grep -E 'Requests/sec|Latency|99%|load|cpu'
   rm -rf /var/tmp/railsfloor/w\$1c\$2r\$rep; cp -r /tmp/railsprobe/w\$1c\$2r\$rep /var/tmp/railsfloor/
   ruby bench/results/railsfloor-20261128/sim.rb /tmp/railsprobe/w\$1c\$2r\$rep \$2
  done
 done; date -u"
