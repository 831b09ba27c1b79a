dir = ARGV[0]
meta = File.read(File.join(dir, "meta.txt")); t0 = meta[/t0 (\S+)/, 1].to_f
Dir.glob(File.join(dir, "[0-9]*.log")).each do |f|
  rs = File.readlines(f).map { |l| x = l.split; { arr: x[1].to_f, take: x[1].to_f + x[2].to_f, end: x[5].to_f } }.select { _1[:arr] > t0 + 0.5 }
  lo = rs.map { _1[:take] }.min; hi = rs.map { _1[:end] }.max
  # time-weighted: threads busy (take..end) and requests waiting (arr..take)
  ev = rs.flat_map { [[_1[:take], 0, 1], [_1[:end], 0, -1], [_1[:arr], 1, 1], [_1[:take], 1, -1]] }.sort_by { [_1[0], -_1[2]] }
  busy = 0; wait = 0; last = ev.first[0]; under = 0.0; tot = 0.0; bw = Hash.new(0.0)
  ev.each do |t, k, d|
    dt = t - last; last = t
    under += dt if busy < 5 && wait > 0
    bw[[busy, wait > 0]] += dt
    tot += dt
    k == 0 ? busy += d : wait += d
  end
  printf("%s: fewer than 5 busy while a request waits: %.1f%% of the time; busy<5 at all: %.1f%%\n", File.basename(f), 100 * under / tot, 100 * bw.select { |(b, _), _| b < 5 }.values.sum / tot)
end
