# Usage: ruby analyze.rb /tmp/fibertail-probe/LABEL
# Per request (fiber_probe.ru's records, the first 0.5 s of the load left out): the server's time
# from arrival to the app's end, split into the queue (arrival to the app's start), the sleep
# (asked 10 ms: the rest is the overshoot) and the JSON; the slowest 1 % against the median
# request; per process and per pool thread.
dir = ARGV.fetch(0)
meta = File.read(File.join(dir, "meta.txt"))
t0 = meta[/t0 (\S+)/, 1].to_f
t1 = meta[/t1 (\S+)/, 1].to_f
recs = Dir.glob(File.join(dir, "[0-9]*.log")).flat_map do |f|
  File.readlines(f).map do |l|
    x = l.split
    { pid: x[0].to_i, th: x[1].to_i, arr: x[2].to_f, start: x[3].to_f, woke: x[4].to_f, end: x[5].to_f,
      live0: x[6].to_i, live1: x[7].to_i, q: x[8].to_f, gcs: x[9].to_i, gct: x[10].to_f / 1000, maj: x[11].to_i }
  end
end
recs.select! { |r| r[:arr] >= t0 + 0.5 && r[:end] <= t1 }
recs.each do |r|
  r[:tot] = r[:end] - r[:arr]
  r[:queue] = r[:start] - r[:arr]
  r[:taken] = r[:q] # arrival to the wait that took it (C)
  r[:gvl] = r[:queue] - r[:q] # taken to the app's start: the GVL and the fibers started before it
  r[:over] = r[:woke] - r[:start] - 0.010
  r[:json] = r[:end] - r[:woke]
end
def pct(a, p) = a.sort[(a.size * p).floor.clamp(0, a.size - 1)]
def mean(a) = a.sum / a.size
def ms(x) = format("%6.2f", 1000 * x)
def row(name, a)
  format("%-12s mean %s p50 %s p90 %s p99 %s max %s ms", name, ms(mean(a)), ms(pct(a, 0.5)), ms(pct(a, 0.9)),
         ms(pct(a, 0.99)), ms(a.max))
end
tots = recs.map { _1[:tot] }
puts "#{recs.size} requests over #{(t1 - t0 - 0.5).round(1)} s; #{File.read(File.join(dir, 'wrk.txt'))[/Requests\/sec.*$/]}"
puts "#{row('server', tots)}  p99/mean #{format('%.2f', pct(tots, 0.99) / mean(tots))}  p99/p50 #{format('%.2f', pct(tots, 0.99) / pct(tots, 0.5))}"
%i[queue taken gvl over json].each { |k| puts row(k.to_s, recs.map { _1[k] }) }
puts row("live0", recs.map { _1[:live0] / 1000.0 }).gsub(" ms", "").sub("live0", "live0 (x1000)")
sorted = recs.sort_by { _1[:tot] }
tail = sorted.last([recs.size / 100, 1].max)
mid = sorted[(recs.size * 0.45).floor...(recs.size * 0.55).floor]
puts "-- mean of each part: the slowest 1 % (#{tail.size}) | the middle 10 % (p45-p55)"
%i[tot queue taken gvl over json].each do |k|
  puts format("  %-6s %s | %s ms", k, ms(mean(tail.map { _1[k] })), ms(mean(mid.map { _1[k] })))
end
puts format("  GCs during the sleep %.2f | %.2f, their ms %.2f | %.2f", mean(tail.map { _1[:gcs].to_f }), mean(mid.map { _1[:gcs].to_f }),
            1000 * mean(tail.map { _1[:gct] }), 1000 * mean(mid.map { _1[:gct] }))
puts format("  major GCs during the sleep %.2f | %.2f", mean(tail.map { _1[:maj].to_f }), mean(mid.map { _1[:maj].to_f }))
one = recs.select { _1[:gcs] == 1 }
[[0, "minor"], [1, "major"]].each do |m, name|
  d = one.select { _1[:maj] == m }.map { _1[:gct] }
  puts format("  one %s GC in a sleep: %d requests, its ms p50 %s p90 %s p99 %s", name, d.size, ms(pct(d, 0.5)), ms(pct(d, 0.9)), ms(pct(d, 0.99))) unless d.empty?
end
puts format("  live fibers on the thread at start %.1f | %.1f, at wake %.1f | %.1f",
            mean(tail.map { _1[:live0].to_f }), mean(mid.map { _1[:live0].to_f }),
            mean(tail.map { _1[:live1].to_f }), mean(mid.map { _1[:live1].to_f }))
puts "-- per process"
recs.group_by { _1[:pid] }.each do |pid, rs|
  a = rs.map { _1[:tot] }
  puts format("  %d n=%d share of tail %d  %s", pid, rs.size, tail.count { _1[:pid] == pid }, row("", a))
end
puts "-- per thread (pid/tid: requests, tail share, mean server, mean queue, mean overshoot, mean live)"
recs.group_by { [_1[:pid], _1[:th]] }.sort.each do |(pid, th), rs|
  puts format("  %d/%d n=%d tail %d server %s queue %s over %s live %.1f", pid, th, rs.size, tail.count { _1[:th] == th },
              ms(mean(rs.map { _1[:tot] })), ms(mean(rs.map { _1[:queue] })), ms(mean(rs.map { _1[:over] })),
              mean(rs.map { _1[:live0].to_f }))
end
puts "-- server time per 0.5 s of the run (n, mean, p99, queue mean, overshoot p99)"
recs.group_by { ((_1[:arr] - t0) / 0.5).floor }.sort.each do |b, rs|
  a = rs.map { _1[:tot] }
  puts format("  t=%4.1f n=%5d mean %s p99 %s queue %s over-p99 %s", b * 0.5, rs.size, ms(mean(a)), ms(pct(a, 0.99)),
              ms(mean(rs.map { _1[:queue] })), ms(pct(rs.map { _1[:over] }, 0.99)))
end

turns = Dir.glob(File.join(dir, "*-turns.txt")).flat_map do |f|
  File.readlines(f).map { |l| x = l.split; { pid: x[0].to_i, th: x[1].to_i, a: x[2].to_f, b: x[3].to_f, took: x[4].to_i, ran: x[5].to_i, tmo: x[6].to_i } }
end
sched = File.join(dir, "schedstat.txt")
puts File.read(sched) if File.exist?(sched)
unless turns.empty?
  puts "-- turns per thread (between t0+0.5 and t1): turns, Ruby time between waits p50/p99/max, wait p50/p99/max (timeout 0 | blocking), took/turn, ran/turn"
  turns.group_by { [_1[:pid], _1[:th]] }.sort.each do |(pid, th), ts|
    ts = ts.sort_by { _1[:a] }
    gaps = ts.each_cons(2).map { |x, y| [y[:a] - x[:b], y] }.select { |_, y| y[:a] > t0 + 0.5 && y[:b] < t1 }
    sel = ts.select { _1[:a] > t0 + 0.5 && _1[:b] < t1 }
    next if sel.empty?

    w0 = sel.select { _1[:tmo].zero? }.map { _1[:b] - _1[:a] }
    wb = sel.reject { _1[:tmo].zero? }.map { _1[:b] - _1[:a] }
    g = gaps.map(&:first)
    f = ->(a) { a.empty? ? "-" : "#{ms(pct(a, 0.5))}/#{ms(pct(a, 0.99))}/#{ms(a.max)}" }
    puts format("  %d/%d turns %d ruby %s  wait0 (%d) %s | wait (%d) %s  took %.1f ran %.1f", pid, th, sel.size, f.(g), w0.size, f.(w0), wb.size, f.(wb),
                mean(sel.map { _1[:took].to_f }), mean(sel.map { _1[:ran].to_f }))
  end
end
