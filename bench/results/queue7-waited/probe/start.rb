dir = ARGV[0]
meta = File.read(File.join(dir, "meta.txt")); t0 = meta[/t0 (\S+)/, 1].to_f
recs = Dir.glob(File.join(dir, "[0-9]*.log")).flat_map { |f| File.readlines(f).map { |l| x = l.split; { pid: x[0].to_i, arr: x[1].to_f - t0, q: x[2].to_f, app: x[3].to_f + x[4].to_f, end: x[5].to_f - t0, thr: x[7].to_i, gvl: x[8].to_f } } }
recs.each { _1[:tot] = _1[:end] - _1[:arr] }
def pct(a, p) = a.sort[(a.size * p).floor.clamp(0, a.size - 1)]
p99 = pct(recs.map { _1[:tot] }, 0.99)
n = (recs.size * 0.01).ceil
[0.05, 0.1, 0.2, 0.3, 0.5].each { |t| printf("arrived before %.2f s: %d requests, %d of them >= p99 (%.1f ms); of the top 1%% (%d)\n", t, recs.count { _1[:arr] < t }, recs.count { _1[:arr] < t && _1[:tot] >= p99 }, 1000 * p99, n) }
recs.select { _1[:arr] < 0.12 }.sort_by { _1[:arr] }.group_by { _1[:pid] }.each { |pid, rs| puts "#{pid}: " + rs.map { format("%.0f/%.0f/%.0f/t%d", 1000 * _1[:arr], 1000 * _1[:q], 1000 * _1[:tot], _1[:thr]) }.join(" ") }
