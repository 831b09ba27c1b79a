# frozen_string_literal: true

# analyze.rb OUTDIR...: per probe run (probe.sh): wrk's figures; per worker the GCs (minor,
# major and reasons, time), the pool's threads, the lag sampler's late wake-ups, and the
# server-side latency (queue + app) with its tail (>= 1.6x the worker's mean): the share whose
# wait held a major GC / any GC and the GC ms inside it; the tail per second of the run; from
# sampler.rb per second: the machine's busy CPU, the CPU of everything but the server and wrk,
# the run-queue wait of each process, and each worker's connections (GET /queue; a change is
# a keep-alive hand-over).
require "json"

def pct(a, q) = a.empty? ? 0 : a.sort[((a.size - 1) * q).round]

# [time, value] steps from each request's start (value at start) and end (value at end), sorted:
# the value at a time is the last step's at or before it.
def steps(reqs, at_start, at_end)
  (reqs.map { |r| [r[0] - r[1] / 1e3, r[at_start]] } + reqs.map { |r| [r[0], r[at_end]] }).sort
end

def value_at(steps, t)
  i = steps.bsearch_index { |s| s[0] > t }
  i = steps.size if i.nil?
  i.zero? ? steps[0][1] : steps[i - 1][1]
end

def worker_report(f, t0, tails)
  lines = File.readlines(f).map { |s| JSON.parse(s) }
  return if lines.size < 3

  gcs = lines.flat_map { |x| x["gcs"] }
  reqs = lines.flat_map { |x| x["reqs"] }
  lags = lines.flat_map { |x| x["lags"] }
  majors = gcs.select { |g| g["major_by"] }
  minors = gcs.reject { |g| g["major_by"] }
  s0 = lines.first["stat"]
  s1 = lines.last["stat"]
  secs = lines.last["t"] - lines.first["t"]
  puts format("  pid %s: %.0f s, %d reqs; minor %d (mean %.2f ms by the profiler), major %d (each %s ms), reasons %s; " \
              "GC.stat time %+d ms; heap slots %d -> %d, free at the first line %.1f %%",
              File.basename(f, ".jsonl"), secs, reqs.size, minors.size, minors.empty? ? 0 : minors.sum { |g| g["ms"] } / minors.size,
              majors.size, majors.map { |g| g["ms"].round(1) }.inspect, majors.map { |g| "#{g['major_by']}/#{g['gc_by']}" }.tally,
              s1["time"] - s0["time"], s0["heap_available_slots"], s1["heap_available_slots"],
              100.0 * s0["heap_free_slots"] / s0["heap_available_slots"])
  gct = steps(reqs, 6, 7)
  gcn = steps(reqs, 4, 4)
  mjn = steps(reqs, 5, 5)
  tot = reqs.map { |r| r[1] + r[3] }
  mean = tot.sum / tot.size
  rows = reqs.map do |r|
    lat = r[1] + r[3]
    a = r[0] - lat / 1e3
    # GCs whose effect is inside [arrival, end]: counts from the request start after arrival to the end
    { end: r[0], lat: lat, app: r[1], q: r[3], gc_ms: value_at(gct, r[0]) - value_at(gct, a),
      gcs: value_at(gcn, r[0]) - value_at(gcn, a), majors: [value_at(mjn, r[0]) - value_at(mjn, a), r[2] ? 1 : 0].max,
      threads: r[8], inflight: r[9] }
  end
  at = ->(st) { st.each_cons(2).filter_map { |(_, a), (t, b)| (t - t0).round(2) if b > a } }
  puts "    major GCs at s (first request start after): #{at.(steps(reqs, 5, 5)).uniq.inspect}"
  tail, rest = rows.partition { |r| r[:lat] >= 1.6 * mean }
  share = ->(rs, &b) { rs.empty? ? 0 : 100.0 * rs.count(&b) / rs.size }
  puts format("    server-side ms: mean %.1f p50 %.1f p99 %.1f (p99/mean %.2f); app p50 %.1f p99 %.1f max %.1f; queue p99 %.1f",
              mean, pct(tot, 0.5), pct(tot, 0.99), pct(tot, 0.99) / mean, pct(reqs.map { |r| r[1] }, 0.5),
              pct(reqs.map { |r| r[1] }, 0.99), reqs.map { |r| r[1] }.max, pct(reqs.map { |r| r[3] }, 0.99))
  puts format("    tail (>= 1.6x mean) %d (%.2f %%): %.0f %% held a major GC, %.0f %% any GC, GC ms inside mean %.1f; " \
              "the rest: %.0f %%, %.0f %%, %.1f ms",
              tail.size, 100.0 * tail.size / rows.size, share.(tail) { |r| r[:majors].positive? }, share.(tail) { |r| r[:gcs].positive? },
              tail.empty? ? 0 : tail.sum { |r| r[:gc_ms] } / tail.size, share.(rest) { |r| r[:majors].positive? },
              share.(rest) { |r| r[:gcs].positive? }, rest.sum { |r| r[:gc_ms] } / [rest.size, 1].max)
  puts "    pool threads seen at request start: #{reqs.map { |r| r[8] }.tally.sort.to_h}"
  puts "    tail ends per second: #{tail.map { |r| (r[:end] - t0).floor }.tally.sort.to_h}"
  puts "    tail with no GC inside, per second: #{tail.select { |r| r[:gcs].zero? }.map { |r| (r[:end] - t0).floor }.tally.sort.to_h}"
  big = lags.select { |l| l[1] >= 10 }
  puts format("    lag sampler: %d late wake-ups >= 4 ms, %d >= 10 ms (max %.1f); of those >= 10 ms %d with a GC meanwhile; " \
              ">= 10 ms without a GC at s %s", lags.size, big.size, lags.map { |l| l[1] }.max || 0, big.count { |l| l[2].positive? },
              big.reject { |l| l[2].positive? }.map { |l| "#{(l[0] - t0).round(1)}:#{l[1].round}" }.inspect)
  tails << [File.basename(f, ".jsonl"), tail]
end

def samples_report(path, t0)
  return unless File.exist?(path)

  s = File.readlines(path).map { |l| JSON.parse(l) }
  hz = 100.0 # USER_HZ
  by_sec = s.each_cons(2).group_by { |a, _| (a["t"] - t0).floor }
  puts "  per second (sampler): machine busy % of 2 cores | others' CPU % of one core (not the server, not wrk) | run-queue wait ms per process | connections per worker (min-max)"
  by_sec.sort.each do |sec, pairs|
    a = pairs.first[0]
    b = pairs.last[1]
    busy = (b["cpu"][0] - a["cpu"][0]).to_f / (b["cpu"][1] - a["cpu"][1]) * 100
    ours = b["procs"].sum { |pid, v| a["procs"][pid] ? v[0] - a["procs"][pid][0] : 0 }
    dt = b["t"] - a["t"]
    others = ((b["cpu"][0] - a["cpu"][0]) - ours) / hz / dt * 100
    waits = b["procs"].filter_map { |pid, v| a["procs"][pid] && format("%s:%d", pid, (v[1] - a["procs"][pid][1]) / 1e6) }
    conns = pairs.map { |x, _| x["queue"]&.map { |w| w["connections"] } }.compact.transpose.map { |c| "#{c.min}-#{c.max}" }
    top = pairs.flat_map { |_, x| (x["others"] || {}).values }.each_with_object(Hash.new(0)) { |(c, n), h| h[c] += n }
    top = top.sort_by { |_, n| -n }.first(3).map { |c, n| "#{c}:#{(n / hz / dt * 100).round}" }
    soft = b["cpuf"] && a["cpuf"] ? format(" softirq %.0f", (b["cpuf"][4] - a["cpuf"][4]) / hz / dt * 100) : ""
    puts format("    s%-3d %5.1f | %6.1f | %s | %s%s%s", sec, busy, others, waits.join(" "), conns.join(" "),
                top.empty? ? "" : " | top others (% of a core): #{top.join(' ')}", soft)
  end
end

ARGV.each do |dir|
  w = JSON.parse(File.read(File.join(dir, "wrk.txt"))[/^BENCH_JSON (.*)$/, 1])
  l = w["latency_us"]
  rps = w["requests"] / (w["duration_us"] / 1e6)
  puts format("%s: %.1f req/s, mean %.1f p50 %.1f p90 %.1f p99 %.1f max %.1f ms, p99/mean %.2f, errors %s; uptime %s",
              dir, rps, l["mean"] / 1e3, l["p50"] / 1e3, l["p90"] / 1e3, l["p99"] / 1e3, l["max"] / 1e3, l["p99"] / l["mean"],
              w["errors"].values.sum, File.read(File.join(dir, "uptime.txt")).scan(/load average: ([\d.]+)/).flatten.join(" -> "))
  files = Dir[File.join(dir, "gc", "*.jsonl")].sort
  # the run's second 0: wrk's start (probe.sh's start.txt)
  t0 = File.read(File.join(dir, "start.txt")).to_f
  tails = []
  files.each { |f| worker_report(f, t0, tails) }
  samples_report(File.join(dir, "samples.jsonl"), t0)
end
