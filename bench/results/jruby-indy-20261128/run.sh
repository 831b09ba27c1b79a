#!/bin/bash
cd /work/wt/base38
uptime
for mode in default indy indy default; do
  if [ $mode = indy ]; then export JAVA_OPTS="-Djruby.compile.invokedynamic=true"; else unset JAVA_OPTS; fi
  echo "== $mode $(date -u +%T)"
  timeout 900 bundle exec ruby bench/jruby.rb --apps hello --rounds 1 --seconds 8 --servers margay-jruby,puma-jruby --results-dir /tmp/indy/$mode-$(date +%s) 2>&1 | grep -E "^\[jruby\] round|hello:"
done
uptime
