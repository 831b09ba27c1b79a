#!/bin/bash
cd /work/wt/integ
s() { echo "== $1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
s core
flock -o /work/wt/bench.lock bundle exec ruby bench/core.rb --baseline /work/wt/base29 --servers margay,margay-base,iodine,nginx --scenarios hello --connections 64,256 --rounds 3 --duration 8 --results-dir bench/results/core-20261127-s29 > /tmp/q29-core.txt 2>&1
s jruby
flock -o /work/wt/bench.lock bundle exec ruby bench/jruby.rb --rounds 2 --seconds 8 --servers margay-jruby,puma-jruby --results-dir bench/results/jruby-20261127-s29 > /tmp/q29-jruby.txt 2>&1
s bars
flock -o /work/wt/bench.lock bundle exec ruby bench/queue_bars.rb --baseline /work/wt/base29 --results-dir bench/results/queue-20261127-run8 > /tmp/q29-bars.txt 2>&1
s done
