dir = ARGV[0]
meta = File.read(File.join(dir, "meta.txt")); t0 = meta[/t0 (\S+)/, 1].to_f
recs = Dir.glob(File.join(dir, "[0-9]*.log")).flat_map { |f| File.readlines(f).map { |l| x = l.split; { pid: x[0].to_i, arr: x[1].to_f, q: x[2].to_f, app: x[3].to_f + x[4].to_f, end: x[5].to_f } } }
recs.each { |r| r[:take] = r[:arr] + r[:q]; r[:tot] = r[:end] - r[:arr] }
adopts = Hash.new { |h, k| h[k] = [] }
Dir.glob(File.join(dir, "h*.log")).each { |f| pid = f[/h(\d+)/, 1].to_i; File.readlines(f).each { |l| w, t = l.split; adopts[pid] << t.to_f if w == "adopt" } }
def pct(a, p) = a.sort[(a.size * p).floor.clamp(0, a.size - 1)]
all = []
recs.group_by { _1[:pid] }.each do |pid, rs|
  rs = rs.select { _1[:arr] > t0 + 0.3 }.sort_by { _1[:take] }
  rs.each_with_index { |r, i| r[:over] = rs[[0, i - 40].max...i].count { |o| o[:arr] > r[:arr] + 0.002 }; r[:adopted] = adopts[pid].any? { |t| t >= r[:arr] - 0.001 && t <= r[:take] } }
  all.concat(rs)
end
p99 = pct(all.map { _1[:tot] }, 0.99)
slow = all.select { _1[:tot] >= p99 }
over = all.select { _1[:over] > 0 }
printf("overtaken: %d, of them with an adopt in the worker between arrival and take: %d\n", over.size, over.count { _1[:adopted] })
printf("slowest 1%%: %d, overtaken %d, adopt-window %d; not overtaken: q mean %.1f app mean %.1f\n", slow.size, slow.count { _1[:over] > 0 }, slow.count { _1[:adopted] }, 1000 * slow.reject { _1[:over] > 0 }.sum { _1[:q] } / [1, slow.count { _1[:over] == 0 }].max, 1000 * slow.sum { _1[:app] } / slow.size)
printf("overtaken: q mean %.1f; others q mean %.1f\n", 1000 * over.sum { _1[:q] } / over.size, 1000 * (all - over).sum { _1[:q] } / (all - over).size)
puts "overtaken count by overtakers: #{over.map { _1[:over] }.tally.sort.to_h}"
printf("base rate of adopt-window: %.3f; among slowest: %.3f\n", all.count { _1[:adopted] }.fdiv(all.size), slow.count { _1[:adopted] }.fdiv(slow.size))
heavy = all.select { _1[:over] >= 3 }
printf("heavily overtaken (>=3): %d, in slowest 1%%: %d, their tot mean %.1f\n", heavy.size, (heavy & slow).size, 1000 * heavy.sum { _1[:tot] } / heavy.size)
# what if heavy ones had the mean tot: p99/mean of the rest
rest = all - heavy
printf("without the heavily overtaken: p99 %.1f mean %.1f ratio %.2f\n", 1000 * pct(rest.map { _1[:tot] }, 0.99), 1000 * rest.sum { _1[:tot] } / rest.size, pct(rest.map { _1[:tot] }, 0.99) / (rest.sum { _1[:tot] } / rest.size))
printf("all: p99 %.1f mean %.1f ratio %.2f\n", 1000 * p99, 1000 * all.sum { _1[:tot] } / all.size, p99 / (all.sum { _1[:tot] } / all.size))
