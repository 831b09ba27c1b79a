#!/bin/bash
cd /tmp/h2batch
for run in "base31 tls" "h2batch tls" "base31 h2c" "h2batch h2c"; do
  set -- $run
  TREE=/work/wt/$1; [ $1 = h2batch ] && TREE=/work/wt/h2batch
  echo "== $(date -u +%T) strace $1 $2"; ./strace.sh $TREE $2 $1-$2
done
