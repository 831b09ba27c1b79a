# ruby analyze.rb DIR: what the slowest 1 % of rails_probe.ru's requests share, against the median.
dir = ARGV[0]
meta = File.read(File.join(dir, "meta.txt"))
t0 = meta[/^t0 (\S+)/, 1].to_f; t1 = meta[/^t1 (\S+)/, 1].to_f
K = %i[pid arr q st en cpu mi0 ma0 gt0 mi1 ma1 gt1 inapp thr].freeze
recs = Dir.glob(File.join(dir, "[0-9]*.log")).flat_map do |f|
  File.readlines(f).reject { _1.start_with?("GC ") }.map { |l| K.zip(l.split.map { _1.include?(".") ? _1.to_f : _1.to_i }).to_h }
end
recs.select! { |r| r[:arr] >= t0 && r[:en] <= t1 }
recs.each do |r|
  r[:tot] = r[:en] - r[:arr]; r[:wait] = r[:st] - r[:arr]; r[:app] = r[:en] - r[:st]
  r[:gvl] = r[:app] - r[:cpu]; r[:gc_in_app] = (r[:gt1] - r[:gt0]) / 1000.0
  r[:minor] = r[:mi1] - r[:mi0]; r[:major] = r[:ma1] - r[:ma0]
end
# GC time while a request was anywhere in the server (arrival..end), per process: from the
# cumulative GC time each record carries at its end, the last one before the arrival.
recs.group_by { _1[:pid] }.each_value do |rs|
  ends = rs.sort_by { _1[:en] }
  rs.each do |r|
    before = ends.bsearch_index { _1[:en] > r[:arr] }
    base = before && before.positive? ? ends[before - 1] : nil
    r[:gc_window] = base ? (r[:gt1] - base[:gt1]) / 1000.0 : r[:gc_in_app]
    r[:major_window] = base ? r[:ma1] - base[:ma1] : r[:major]
  end
end
def pct(a, p) = a.sort[(a.size * p).floor.clamp(0, a.size - 1)]
def mean(a) = a.sum / a.size.to_f
def row(name, a) = format("%-12s mean %7.2f p50 %7.2f p90 %7.2f p99 %7.2f max %7.2f ms", name, 1000 * mean(a), 1000 * pct(a, 0.5), 1000 * pct(a, 0.9), 1000 * pct(a, 0.99), 1000 * a.max)
tot = recs.map { _1[:tot] }
puts "#{recs.size} requests in #{(t1 - t0).round(1)} s (#{(recs.size / (t1 - t0)).round(1)}/s), server-side p99/mean #{(pct(tot, 0.99) / mean(tot)).round(2)}"
puts meta.lines.grep(/load|cpu/).join.strip
wl = File.read(File.join(dir, "wrk.txt"))
puts "wrk: #{wl[/Requests\/sec:\s+\S+/]}; latency #{wl[/Latency\s+.*$/]}; 99% #{wl[/99%\s+\S+/]}"
%i[tot wait app cpu gvl gc_in_app gc_window].each { |k| puts row(k.to_s, recs.map { _1[k] }) }
st = recs.map { _1[:mi1] }.max - recs.map { _1[:mi0] }.min
puts "GC over the run: minor #{st}, major #{recs.map { _1[:ma1] }.max - recs.map { _1[:ma0] }.min}, time #{recs.map { _1[:gt1] }.max - recs.map { _1[:gt0] }.min} ms (all processes)"
recs.group_by { _1[:pid] }.each { |pid, rs| puts "  #{pid}: n=#{rs.size} minor #{rs.map { _1[:mi1] }.max - rs.map { _1[:mi0] }.min} major #{rs.map { _1[:ma1] }.max - rs.map { _1[:ma0] }.min} gc ms #{rs.map { _1[:gt1] }.max - rs.map { _1[:gt0] }.min} " + row("tot", rs.map { _1[:tot] }) }
p99 = pct(tot, 0.99); p50 = pct(tot, 0.5)
tail = recs.select { _1[:tot] >= p99 }
mid = recs.select { (_1[:tot] - p50).abs <= 0.02 * p50 }
[["slowest 1%", tail], ["median +-2%", mid]].each do |name, rs|
  puts "-- #{name} (#{rs.size})"
  %i[tot wait app cpu gvl gc_in_app gc_window].each { |k| puts "  " + row(k.to_s, rs.map { _1[k] }) }
  puts format("  major GC in window: %.0f%%, in app: %.0f%%; minor in app %.0f%%; inapp at start %s",
              100.0 * rs.count { _1[:major_window].positive? } / rs.size, 100.0 * rs.count { _1[:major].positive? } / rs.size,
              100.0 * rs.count { _1[:minor].positive? } / rs.size, rs.map { _1[:inapp] }.tally.sort.to_h)
end
puts "all: inapp at start #{recs.map { _1[:inapp] }.tally.sort.to_h}; major GC in window #{(100.0 * recs.count { _1[:major_window].positive? } / recs.size).round}%"
# overtaking: requests that arrived after r but started before it (same process)
recs.group_by { _1[:pid] }.each_value do |rs|
  by_st = rs.sort_by { _1[:st] }
  by_st.each_with_index { |r, i| r[:overtaken] = by_st[0...i].count { _1[:arr] > r[:arr] + 0.001 } }
end
puts "overtaken (started after a later arrival): all mean #{mean(recs.map { _1[:overtaken] }).round(2)}, tail mean #{mean(tail.map { _1[:overtaken] }).round(2)}"
# per 0.25 s: throughput, mean and p99 server time, GC ms
recs.group_by { ((_1[:en] - t0) / 0.25).floor }.sort.each do |b, rs|
  a = rs.map { _1[:tot] }
  g = rs.group_by { _1[:pid] }.sum { |_, x| x.map { _1[:gt1] }.max - x.map { _1[:gt1] }.min }
  printf("  t=%5.2f done %3d mean %6.1f max %6.1f app-mean %5.1f gc %3d ms major %d\n", b * 0.25, rs.size, 1000 * mean(a), 1000 * a.max,
         1000 * mean(rs.map { _1[:app] }), g, rs.group_by { _1[:pid] }.sum { |_, x| x.map { _1[:ma1] }.max - x.map { _1[:ma0] }.min })
end if ENV["BUCKETS"]
gcs = Dir.glob(File.join(dir, "[0-9]*.log")).flat_map { |f| File.readlines(f).grep(/^GC /).map { "#{File.basename(f, ".log")} #{_1}" } }
majors = gcs.select { _1[/major_gc_count=(\d+)/] && !_1.include?("[nil,") }
puts "major GCs seen (pid, end of the request that saw it, [major_by, gc_by]):"
majors.each { |l| x = l.split; puts "  #{x[0]} t=#{(x[2].to_f - t0).round(2)} #{x[3]} #{x[4].split(",").grep(/old|remembered/).join(" ")}" }
