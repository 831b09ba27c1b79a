# Usage: ruby tmp/probe/run.rb SERVERDIR LABEL [workers] [conns] [seconds] [extra margay flags...]
require "fileutils"
require "socket"
dir, label, workers, conns, secs, *extra = ARGV
workers = (workers || 4).to_i; conns = (conns || 64).to_i; secs = (secs || 6).to_i
out = "/tmp/q7probe/#{label}"
FileUtils.rm_rf(out); FileUtils.mkdir_p(out)
port = (s = TCPServer.new("127.0.0.1", 0); p = s.addr[1]; s.close; p)
app = File.expand_path("io_probe.ru", __dir__)
env = { "Q7TRACE" => out, "PROBE_DIR" => out, "BUNDLE_GEMFILE" => File.join(dir, "Gemfile") }
cmd = %W[bundle exec exe/margay -b tcp://127.0.0.1:#{port} -e production -q -w #{workers} -t 0:5] + extra + [app]
pid = Process.spawn(env, *cmd, chdir: dir, pgroup: true, out: File.join(out, "server.out"), err: [:child, :out])
def kids(pid) = Dir.glob("/proc/[0-9]*/stat").filter_map { |f| (x = File.read(f).split(") ", 2).last.split; x[2].to_i == pid && File.basename(File.dirname(f)).to_i != pid ? File.basename(File.dirname(f)).to_i : nil) rescue nil }
60.times { break if kids(pid).size >= workers; sleep 0.25 }
sleep 0.5
cpu = ->(pids) { pids.sum { |q| (f = File.read("/proc/#{q}/stat").split(") ", 2).last.split; f[11].to_i + f[12].to_i) rescue 0 } }
stat = -> { File.readlines("/proc/stat").first.split[1..].map(&:to_i) }
s0 = stat.call; w = kids(pid); c0 = cpu.call(w)
t0 = Process.clock_gettime(Process::CLOCK_REALTIME)
wrk = `wrk -t2 -c#{conns} -d#{secs}s --timeout 10s --latency http://127.0.0.1:#{port}/`
t1 = Process.clock_gettime(Process::CLOCK_REALTIME)
s1 = stat.call; c1 = cpu.call(w)
Process.kill("TERM", -pid) rescue nil
Process.wait(pid) rescue nil
tot = s1.zip(s0).map { |a, b| a - b }
busy = tot.sum - tot[3] - tot[4]
File.write(File.join(out, "wrk.txt"), wrk)
File.write(File.join(out, "meta.txt"), "t0 #{t0}\nt1 #{t1}\ncpu_busy_frac #{busy.fdiv(tot.sum).round(3)} (of 2 cores)\nworkers_cpu_s #{(c1 - c0) / 100.0}\n")
puts wrk
puts File.read(File.join(out, "meta.txt"))
