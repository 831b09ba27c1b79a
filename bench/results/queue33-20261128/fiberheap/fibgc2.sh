#!/bin/bash
# fibers-2-256 with pre-grown heaps (the setting that removed the nofree full GCs in gc_check), then without, alternated twice.
set -u
R=/var/tmp/q33/fibgc2
mkdir -p $R
stamp() { echo "== $(date -u +%T) $(uptime) :: $*"; }
for pass in 1 2; do
for setting in "RUBY_GC_HEAP_0_INIT_SLOTS=400000 RUBY_GC_HEAP_1_INIT_SLOTS=100000 RUBY_GC_HEAP_2_INIT_SLOTS=50000" ""; do
  stamp "queue fibers-2-256 pass $pass [$setting]"
  env $setting bundle exec ruby bench/queue.rb --load wrk --connections 256 --rounds 3 --fibers --results-dir $R 2>&1 | grep -v '^\[queue\]   '
done
done
stamp done
