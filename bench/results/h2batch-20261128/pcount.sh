#!/bin/bash
# pcount.sh MODE M HOLD_NS TAG: pstat.sh on the counting copy (tree-count) with HOLD_NS, then the
# flusher's counts from the server's log (printed at Engine#close)
MODE=$1; M=$2; export HOLD_NS=$3; TAG=$4
/tmp/h2batch/pstat.sh /tmp/h2batch/tree-count $MODE $M $TAG
sleep 2
grep h2_flush /tmp/h2batch/server-$MODE.log || echo "   (no flusher line)"
