dir = ARGV[0]
meta = File.read(File.join(dir, "meta.txt"))
t0 = meta[/t0 (\S+)/, 1].to_f
recs = Dir.glob(File.join(dir, "[0-9]*.log")).flat_map { |f| File.readlines(f).map { |l| x = l.split; { pid: x[0].to_i, arr: x[1].to_f, q: x[2].to_f, app: x[3].to_f + x[4].to_f, end: x[5].to_f, gvl: x[8].to_f } } }
recs.each { |r| r[:take] = r[:arr] + r[:q]; r[:tot] = r[:end] - r[:arr] }
def pct(a, p) = a.sort[(a.size * p).floor.clamp(0, a.size - 1)]
recs.group_by { _1[:pid] }.each do |pid, rs|
  rs = rs.select { _1[:arr] > t0 + 0.3 }.sort_by { _1[:take] }
  # overtakes: requests that arrived >1ms after r yet were taken before r
  over = rs.each_with_index.map { |r, i| rs[[0, i - 40].max...i].count { |o| o[:arr] > r[:arr] + 0.002 } }
  tail = rs.map { _1[:tot] }.then { |a| pct(a, 0.99) }
  slow = rs.each_index.select { rs[_1][:tot] >= tail }
  printf("%d: requests overtaken by a later arrival: %d of %d (mean overtakers %.2f); among slowest 1%%: %d of %d, overtakers there %.1f\n",
         pid, over.count(&:positive?), rs.size, over.sum.fdiv(rs.size), slow.count { over[_1].positive? }, slow.size, slow.sum { over[_1] }.fdiv(slow.size))
  # concurrency: requests in system (arrived, not ended) at each arrival
  ev = rs.flat_map { [[_1[:arr], 1], [_1[:end], -1]] }.sort
  n = 0; hist = Hash.new(0); last = ev.first[0]
  ev.each { |t, d| hist[n] += t - last; last = t; n += d }
  tot = hist.values.sum
  puts "   requests in this worker (time-weighted): " + hist.sort.map { |k, v| "#{k}:#{(100 * v / tot).round(1)}%" }.select { !_1.end_with?(":0.0%") }.join(" ")
end
