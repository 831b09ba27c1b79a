#!/bin/bash
# Everything of railsfib's first lock hold, in order, each bounded.
set -u
cd /work/wt/railsfib
R=bench/results/railsfib-20261127
mkdir -p $R /tmp/railsfib/runs
echo "start $(date -u +%FT%TZ)"; uptime | tee $R/uptime-1.txt
# 1. the brief's run, as is
timeout 600 bundle exec ruby bench/waiting.rb --bars rails --servers margay-fibers --rounds 2 --results-dir $R 2>&1 | tee $R/run.stdout
uptime | tee -a $R/uptime-1.txt
# 3. the driver: fresh server per c, 20 s measured, perf record
RUBYOPT=-r/tmp/railsfib/probe.rb timeout 600 ruby /tmp/railsfib/drive.rb /tmp/railsfib/runs/drive-base 64,256 20 perf
mv /tmp/railsfib/out /tmp/railsfib/runs/drive-base/probe
uptime | tee -a $R/uptime-1.txt
# 5. lever: a bigger heap from the start (fewer minor GCs), old-object limit factor 3
RF_ENV_RUBY_GC_HEAP_INIT_SLOTS=1500000 RF_ENV_RUBY_GC_HEAP_OLDOBJECT_LIMIT_FACTOR=3 RUBYOPT=-r/tmp/railsfib/probe.rb timeout 600 ruby /tmp/railsfib/drive.rb /tmp/railsfib/runs/drive-gcheap 64,256 20
mv /tmp/railsfib/out /tmp/railsfib/runs/drive-gcheap/probe
uptime | tee -a $R/uptime-1.txt
# 6. lever: at most 64 requests in flight (the rest wait in the kernel)
RF_ARGS="--max-in-flight 64" RUBYOPT=-r/tmp/railsfib/probe.rb timeout 600 ruby /tmp/railsfib/drive.rb /tmp/railsfib/runs/drive-mif64 64,256 20
mv /tmp/railsfib/out /tmp/railsfib/runs/drive-mif64/probe
uptime | tee -a $R/uptime-1.txt
echo "end $(date -u +%FT%TZ)"
