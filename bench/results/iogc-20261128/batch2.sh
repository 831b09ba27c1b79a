#!/bin/bash
# The second probe batch (sampler.rb now names the other processes that used CPU), under one
# hold of the bench lock, from the tree's root:
#   flock -o /work/wt/bench.lock bench/results/iogc-20261128/batch2.sh
set -u
p=bench/results/iogc-20261128/probe.sh
$p 4 15 /tmp/iogc/w4c
$p 2 15 /tmp/iogc/w2c
$p 4 15 /tmp/iogc/w4d
