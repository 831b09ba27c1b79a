# Usage: ruby summary.rb /tmp/fibertail-probe/LABEL...: one Markdown row per run (wrk's figures,
# then the server-side split of analyze.rb: the slowest 1 % against the middle 10 %).
def ms_of(s) = s.end_with?("ms") ? s.to_f : s.end_with?("us") ? s.to_f / 1000 : s.to_f * 1000
puts "| run | start (UTC) | load at the end | req/s | wrk mean | wrk p50 | wrk p99 | p99/mean | tail: queue, overshoot ms (middle) | tail: GC ms in the sleep (middle) | major GC in the sleep, tail (middle) | run-queue wait per fiber thread s (of ~6) |"
puts "|---|---|---|---:|---:|---:|---:|---:|---|---|---|---|"
ARGV.each do |dir|
  wrk = File.read(File.join(dir, "wrk.txt"))
  meta = File.read(File.join(dir, "meta.txt"))
  an = `ruby #{File.join(__dir__, 'analyze.rb')} #{dir}`
  mean = ms_of(wrk[/Latency\s+(\S+)/, 1])
  p50 = ms_of(wrk[/^\s+50%\s+(\S+)/, 1])
  p99 = ms_of(wrk[/^\s+99%\s+(\S+)/, 1])
  rps = wrk[/Requests\/sec:\s+(\S+)/, 1].to_f
  start = Time.at(meta[/t0 (\S+)/, 1].to_f).utc.strftime("%H:%M:%S")
  load = meta[/loadavg (\S+)/, 1]
  part = ->(k) { an[/^  #{k}\s+([\d.]+) \|\s+([\d.]+)/] ? "#{$1.to_f.round(1)} (#{$2.to_f.round(1)})" : "-" }
  gc = an[/GCs during the sleep [\d.]+ \| [\d.]+, their ms ([\d.]+) \| ([\d.]+)/] ? "#{$1} (#{$2})" : "-"
  maj = an[/major GCs during the sleep ([\d.]+) \| ([\d.]+)/] ? "#{$1} (#{$2})" : "-"
  rq = an.scan(/cpu ([\d.]+) s, waited on the run queue ([\d.]+) s/).map { |c, w| [c.to_f, w.to_f] }.select { |c, _| c > 0.3 }
  rqs = rq.empty? ? "-" : format("%.2f", rq.sum { _2 } / rq.size)
  puts format("| %s | %s | %s | %.0f | %.1f | %.1f | %.1f | %.2f | %s, %s | %s | %s | %s |", File.basename(dir), start, load, rps, mean, p50,
              p99, p99 / mean, part.("queue"), part.("over"), gc, maj, rqs)
end
