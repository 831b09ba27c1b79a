#!/bin/bash
# The probe runs of README.md's first table, in this order, under one hold of the bench lock:
#   flock -o /work/wt/bench.lock bench/results/iogc-20261128/batch1.sh
# (from the tree's root). Each: probe.sh W 15 /tmp/iogc/LABEL [margay args].
set -u
p=bench/results/iogc-20261128/probe.sh
$p 2 15 /tmp/iogc/w2a
$p 4 15 /tmp/iogc/w4a
$p 2 15 /tmp/iogc/w2room --heap-room-before-fork 0.4
$p 4 15 /tmp/iogc/w4room --heap-room-before-fork 0.4
$p 2 15 /tmp/iogc/w2b
$p 4 15 /tmp/iogc/w4b
