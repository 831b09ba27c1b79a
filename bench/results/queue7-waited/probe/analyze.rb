# ruby analyze.rb DIR: per-request records of io_probe.ru
dir = ARGV[0]
meta = File.read(File.join(dir, "meta.txt"))
t0 = meta[/t0 (\S+)/, 1].to_f; t1 = meta[/t1 (\S+)/, 1].to_f
recs = Dir.glob(File.join(dir, "[0-9]*.log")).flat_map { |f| File.readlines(f).map { |l| x = l.split; { pid: x[0].to_i, arr: x[1].to_f, q: x[2].to_f, sl: x[3].to_f, js: x[4].to_f, end: x[5].to_f, inapp: x[6].to_i, thr: x[7].to_i, gvl: x[8].to_f } } }
recs.select! { |r| r[:arr] >= t0 && r[:end] <= t1 }
recs.each { |r| r[:tot] = r[:end] - r[:arr] }
def pct(a, p) = a.sort[(a.size * p).floor.clamp(0, a.size - 1)]
def row(name, a) = format("%-10s mean %6.2f p50 %6.2f p90 %6.2f p99 %6.2f max %6.2f ms  p99/mean %.2f", name, 1000 * a.sum / a.size, 1000 * pct(a, 0.5), 1000 * pct(a, 0.9), 1000 * pct(a, 0.99), 1000 * a.max, pct(a, 0.99) / (a.sum / a.size))
puts "#{recs.size} requests"
puts row("server", recs.map { _1[:tot] })
puts row("queue", recs.map { _1[:q] })
puts row("sleep", recs.map { _1[:sl] })
puts row("json", recs.map { _1[:js] })
puts row("take->app", recs.map { _1[:gvl] })
puts row("app", recs.map { _1[:sl] + _1[:js] })
recs.group_by { _1[:pid] }.each { |pid, rs| puts "#{pid}: n=#{rs.size} " + row("srv", rs.map { _1[:tot] }) + format(" q mean %.1f", 1000 * rs.sum { _1[:q] } / rs.size) }
tail = recs.sort_by { -_1[:tot] }.first(recs.size / 100)
puts "-- the slowest 1% (#{tail.size}):"
puts row("  queue", tail.map { _1[:q] }), row("  sleep", tail.map { _1[:sl] }), row("  json", tail.map { _1[:js] }), row("  take->app", tail.map { _1[:gvl] })
puts "  inapp at start histogram: #{tail.map { _1[:inapp] }.tally.sort.to_h}  threads: #{tail.map { _1[:thr] }.tally.sort.to_h}"
puts "  all: inapp #{recs.map { _1[:inapp] }.tally.sort.to_h}"
puts "  tail arrival offsets (s from start): #{tail.map { (_1[:arr] - t0).round(2) }.sort.each_slice(10).map(&:first).inspect}"
# per 0.5 s bucket: mean and p99 server time
recs.group_by { ((_1[:arr] - t0) / 0.5).floor }.sort.each { |b, rs| a = rs.map { _1[:tot] }; printf("  t=%4.1f n=%4d mean %5.1f p99 %5.1f q %5.1f sleep-p99 %5.1f\n", b * 0.5, rs.size, 1000 * a.sum / a.size, 1000 * pct(a, 0.99), 1000 * rs.sum { _1[:q] } / rs.size, 1000 * pct(rs.map { _1[:sl] }, 0.99)) }
