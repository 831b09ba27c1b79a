#!/bin/bash
# Stop 26's quiet window, part 2 (after quiet26.sh): fiber mode against Itsi and Falcon; Margay on JRuby against Puma on JRuby. Tree: /work/wt/integ.
set -u
cd /work/wt/integ
R=/work/wt/integ/bench/results
while pgrep -f quiet26.sh >/dev/null; do sleep 5; done
mkdir -p $R/waiting-20261127-s26 $R/jruby-20261127-s26
cp "$0" $R/waiting-20261127-s26/
echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): bench/waiting.rb"
flock -o /work/wt/bench.lock timeout 1500 bundle exec ruby bench/waiting.rb --bars sleep,cluster --servers margay-fibers,itsi,falcon --rounds 3 --results-dir $R/waiting-20261127-s26 2>&1 | tail -30
echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): bench/jruby.rb"
flock -o /work/wt/bench.lock timeout 1500 bundle exec ruby bench/jruby.rb --rounds 2 --seconds 8 --warmup 10 --results-dir $R/jruby-20261127-s26 2>&1 | tail -20
echo "== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
