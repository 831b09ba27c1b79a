#!/bin/bash
cd /tmp/h2batch
(date -u; uptime)
echo "#### pstat base31 vs h2batch"
./pstat-all.sh
echo "#### pcount (counting copy of h2batch, HOLD_NS from the environment)"
for r in 1 2; do
for m in 100 10; do
for ns in 1000000 250000 4000000; do
  echo "== $(date -u +%T) tls m$m hold_ns $ns r$r"; ./pcount.sh tls $m $ns count-tls-m$m-$ns-r$r
done
done
done
(date -u; uptime)
