#!/bin/bash
# Inside the Ruby 3.3 chroot, from /src: fiber mode's full GCs (one process, gc_check.sh) with the
# default GC settings and with two heap settings; then the fibers-2-256 load with each.
set -u
R=/var/tmp/q33/fibgc
mkdir -p $R
stamp() { echo "== $(date -u +%T) $(uptime) :: $*"; }
for setting in "" "RUBY_GC_HEAP_FREE_SLOTS_MIN_RATIO=0.50" "RUBY_GC_HEAP_0_INIT_SLOTS=400000 RUBY_GC_HEAP_1_INIT_SLOTS=100000 RUBY_GC_HEAP_2_INIT_SLOTS=50000"; do
  stamp "gc_check fibers [$setting]"
  env $setting bash bench/results/fibertail-probe/gc_check.sh fibers
done
for setting in "" "RUBY_GC_HEAP_FREE_SLOTS_MIN_RATIO=0.50"; do
  stamp "queue fibers-2-256 [$setting]"
  env $setting bundle exec ruby bench/queue.rb --load wrk --connections 256 --rounds 3 --fibers --results-dir $R 2>&1 | grep -v '^\[queue\]   '
done
stamp done
