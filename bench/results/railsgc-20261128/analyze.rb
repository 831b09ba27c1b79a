# frozen_string_literal: true

# analyze.rb OUTDIR...: per probe run (probe.sh), wrk's figures and per worker the GCs seen
# by gcprobe.ru over the load: minor/major counts and time, major_by reasons, old_objects
# growth per second, heap_live_slots, and the app time of requests with and without a
# major GC inside them.
require "json"

def pct(a, q) = a.empty? ? 0 : a.sort[((a.size - 1) * q).round]

# GC events located between consecutive request starts (the first start that sees the new count).
def events(reqs, idx)
  starts = reqs.map { |r| [r[0] - r[1] / 1e3, r[idx]] }.sort
  starts.each_cons(2).filter_map { |(_, a), (t, b)| t if b > a }
end

# The server-side latency (queue + app) and, for the slowest (>= 1.6x the mean) against the
# rest, the share whose wait held a GC of this worker, minor or major.
def tail_report(reqs)
  return if reqs.first.size < 6

  majors = events(reqs, 5)
  all = events(reqs, 4)
  tot = reqs.map { |r| r[1] + r[3] }
  mean = tot.sum / tot.size
  within = ->(r, evs) { a = r[0] - (r[1] + r[3]) / 1e3; evs.count { |t| t >= a && t <= r[0] } }
  tail, rest = reqs.partition { |r| r[1] + r[3] >= 1.6 * mean }
  share = ->(rs, evs) { rs.empty? ? 0 : 100.0 * rs.count { |r| within.(r, evs).positive? } / rs.size }
  puts format("    server-side (queue+app) ms: mean %.1f p50 %.1f p99 %.1f (p99/mean %.2f); queue p99 %.1f; " \
              "tail (>= 1.6x mean) %d (%.1f %%): %.0f %% held a major GC, %.0f %% any GC; the rest: %.0f %%, %.0f %%",
              mean, pct(tot, 0.5), pct(tot, 0.99), pct(tot, 0.99) / mean, pct(reqs.map { |r| r[3] }, 0.99), tail.size,
              100.0 * tail.size / reqs.size, share.(tail, majors), share.(tail, all), share.(rest, majors), share.(rest, all))
  t0 = reqs.map(&:first).min
  puts "    tail ends per second: #{tail.map { |r| (r[0] - t0).floor }.tally.sort.to_h}" if ENV["BINS"]
end

ARGV.each do |dir|
  w = JSON.parse(File.read(File.join(dir, "wrk.txt"))[/^BENCH_JSON (.*)$/, 1])
  l = w["latency_us"]
  rps = w["requests"] / (w["duration_us"] / 1e6)
  puts format("%s: %.1f req/s, mean %.1f p50 %.1f p99 %.1f ms, p99/mean %.2f, errors %s",
              dir, rps, l["mean"] / 1e3, l["p50"] / 1e3, l["p99"] / 1e3, l["p99"] / l["mean"],
              w["errors"].values.sum)
  Dir[File.join(dir, "gc", "*.jsonl")].sort.each do |f|
    lines = File.readlines(f).map { |s| JSON.parse(s) }
    next if lines.size < 3

    gcs = lines.flat_map { |x| x["gcs"] }
    reqs = lines.flat_map { |x| x["reqs"] }.map { |r| r.size == 2 ? [0, *r] : r } # the first runs: [app ms, major]
    majors = gcs.select { |g| g["major_by"] }
    minors = gcs.reject { |g| g["major_by"] }
    a, b = lines.first, lines.last
    secs = b["t"] - a["t"]
    s0, s1 = a["stat"], b["stat"]
    in_major = reqs.select { |r| r[2] }.map { |r| r[1] }
    other = reqs.reject { |r| r[2] }.map { |r| r[1] }
    puts format("  pid %s: %.0f s, %d reqs; minor %d (%.1f ms total, mean %.2f), major %d (%.1f ms total, each %s), " \
                "reasons %s", File.basename(f, ".jsonl"), secs, reqs.size, minors.size, minors.sum { |g| g["ms"] },
                minors.empty? ? 0 : minors.sum { |g| g["ms"] } / minors.size, majors.size, majors.sum { |g| g["ms"] },
                majors.map { |g| g["ms"].round }.inspect, majors.map { |g| "#{g['major_by']}/#{g['gc_by']}" }.tally)
    puts format("    old_objects %d -> %d (%+.0f/s, limit %d -> %d), heap_live_slots %d -> %d, oldmalloc %d/%d, " \
                "GC.stat time %+d ms", s0["old_objects"], s1["old_objects"], (s1["old_objects"] - s0["old_objects"]) / secs,
                s0["old_objects_limit"], s1["old_objects_limit"], s0["heap_live_slots"], s1["heap_live_slots"],
                s1["oldmalloc_increase_bytes"], s1["oldmalloc_increase_bytes_limit"], s1["time"] - s0["time"])
    puts format("    app ms: all mean %.2f p50 %.2f p99 %.2f; %d with a major GC inside: mean %.2f; others mean %.2f p99 %.2f",
                reqs.sum { |r| r[1] } / [reqs.size, 1].max, pct(reqs.map { |r| r[1] }, 0.5), pct(reqs.map { |r| r[1] }, 0.99),
                in_major.size, in_major.sum / [in_major.size, 1].max, other.sum / [other.size, 1].max, pct(other, 0.99))
    tail_report(reqs)
    puts "    majors at (s since first line): #{majors.map { |g| g['at'] }.inspect}" if ENV["AT"]
  end
end
