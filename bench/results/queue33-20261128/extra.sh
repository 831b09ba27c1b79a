#!/bin/bash
# Inside the Ruby 3.3 chroot, from /src (this tree): GC probes over the Rails row (wrk -c64, 2
# workers) and fiber mode, then heap_room_before_fork=0.4 on the Rails keep-alive rows against
# main (base32, as margay-base) and Puma. Results under /var/tmp/q33.
set -u
R=/var/tmp/q33
stamp() { echo "== $(date -u +%T) $(uptime) :: $*"; }
P=$R/probe
mkdir -p $P
export BENCH_RAILS_DB=$P/rails.sqlite3
stamp "seed"
BUNDLE_GEMFILE=bench/Gemfile RAILS_ENV=production RACK_ENV=production bundle exec ruby -e 'require "./bench/apps/rails/config/environment"; puts "posts: #{Post.count}"'
stamp "probe margay m1"; bench/results/railsgc-20261128/probe.sh margay 15 $P/m1
stamp "probe margay room0.4"; bench/results/railsgc-20261128/probe.sh margay 15 $P/room0.4 --heap-room-before-fork 0.4
stamp "probe puma p1"; bench/results/railsgc-20261128/probe.sh puma 15 $P/p1
stamp "gc_check fibers threads"; bash bench/results/fibertail-probe/gc_check.sh fibers threads > $P/gc_check.txt 2>&1
unset BENCH_RAILS_DB
stamp "compile base32"
(cd $R/base32 && bundle exec rake compile >/dev/null 2>&1) || { echo "base32 compile failed"; exit 1; }
for wc in "2 64" "4 64" "2 256" "4 256"; do
  set -- $wc
  stamp "room0.4 rails $1 $2"
  bundle exec ruby bench/queue.rb --load wrk --workers $1 --connections $2 --rounds 3 --rails \
    --baseline $R/base32 --margay-arg=--heap-room-before-fork=0.4 --results-dir $R/room 2>&1 | grep -v '^\[queue\]   '
done
stamp "done"
