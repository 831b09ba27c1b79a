#!/bin/bash
# usage: q33-run.sh NAME 'inner command'   (runs in /work/wt/q33b)
cd /work/wt/q33b
name=$1; shift
BUNDLE_WITHOUT=peers:plugins MARGAY_RUBY33_TIMEOUT=1800 flock -o /work/wt/bench.lock .ci/ruby33 bash -c "mkdir -p /var/tmp/q33/$name && { date -u; uptime; ruby -v; } | tee /var/tmp/q33/$name/start.txt && bundle exec rake compile >/dev/null 2>&1 && $*" > /tmp/q33-$name.log 2>&1
echo "exit $?" >> /tmp/q33-$name.log
