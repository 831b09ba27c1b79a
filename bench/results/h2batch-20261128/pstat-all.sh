#!/bin/bash
# base31 against h2batch, alternated, CPU per request and syscalls at a fixed count
cd /tmp/h2batch
for r in 1 2; do
for run in "tls 10" "tls 100" "h2c 100"; do
  set -- $run
  ./pstat.sh /work/wt/base31 $1 $2 base-$1-m$2-r$r
  ./pstat.sh /work/wt/h2batch $1 $2 h2batch-$1-m$2-r$r
done
done
