# Usage: ruby run.rb SERVERDIR LABEL [workers] [conns] [seconds] [extra margay flags...]
# Starts SERVERDIR's exe/margay in fiber mode on fiber_probe.ru, runs wrk -t2 against it, keeps
# wrk's output, the records and the CPU figures in /tmp/fibertail-probe/LABEL.
require "fileutils"
require "socket"
dir, label, workers, conns, secs, *extra = ARGV
workers = (workers || 2).to_i
conns = (conns || 256).to_i
secs = (secs || 6).to_i
out = "/tmp/fibertail-probe/#{label}"
FileUtils.rm_rf(out)
FileUtils.mkdir_p(out)
port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
app = File.expand_path("fiber_probe.ru", __dir__)
env = { "PROBE_DIR" => out, "BUNDLE_GEMFILE" => File.join(dir, "Gemfile") }
wflag = workers.positive? ? %W[-w #{workers}] : []
cmd = %W[bundle exec exe/margay -b tcp://127.0.0.1:#{port} -e production -q --fibers] + wflag + extra + [app]
pid = Process.spawn(env, *cmd, chdir: dir, pgroup: true, out: File.join(out, "server.out"), err: %i[child out])
up = false
80.times do
  begin
    TCPSocket.new("127.0.0.1", port).close
    up = true
    break
  rescue SystemCallError
    sleep 0.25
  end
end
abort "server not up" unless up
sleep(workers.positive? ? 2 : 0.5)
workers_of = lambda do
  Dir.glob("/proc/[0-9]*/stat").filter_map do |f|
    x = File.read(f).split(") ", 2).last.split
    x[1].to_i == pid ? File.basename(File.dirname(f)).to_i : nil
  rescue SystemCallError
    nil
  end
end
kids = workers.positive? ? workers_of.call : [pid]
# per thread: [cpu ns, runqueue wait ns] from /proc/PID/task/TID/schedstat
sched = lambda do
  kids.flat_map { |k| Dir.glob("/proc/#{k}/task/*/schedstat").map { |f| [f, File.read(f).split.first(2).map(&:to_i)] } }.to_h
rescue SystemCallError
  {}
end
sc0 = sched.call
stat = -> { File.readlines("/proc/stat").first.split[1..].map(&:to_i) }
s0 = stat.call
t0 = Process.clock_gettime(Process::CLOCK_REALTIME)
wrk = `wrk -t2 -c#{conns} -d#{secs}s --timeout 10s --latency http://127.0.0.1:#{port}/`
t1 = Process.clock_gettime(Process::CLOCK_REALTIME)
s1 = stat.call
sc1 = sched.call
lines = sc1.filter_map do |f, (cpu, delay)|
  c0, d0 = sc0[f] || [0, 0]
  next if cpu - c0 < 50_000_000 # threads that ran under 50 ms

  format("%s cpu %.2f s, waited on the run queue %.2f s", f[%r{/proc/(\d+/task/\d+)}, 1], (cpu - c0) / 1e9, (delay - d0) / 1e9)
end
File.write(File.join(out, "schedstat.txt"), "-- worker threads over the load (/proc/PID/task/TID/schedstat)\n" + lines.map { "  #{_1}\n" }.join)
Process.kill("TERM", -pid)
Process.wait(pid)
tot = s1.zip(s0).map { |a, b| a - b }
busy = tot.sum - tot[3] - tot[4]
File.write(File.join(out, "wrk.txt"), wrk)
File.write(File.join(out, "meta.txt"), "t0 #{t0}\nt1 #{t1}\ncpu_busy_frac #{busy.fdiv(tot.sum).round(3)}\nloadavg #{File.read('/proc/loadavg')}")
puts wrk[/Latency Distribution.*?99%\s+\S+/m], wrk[/Requests\/sec.*$/]
puts File.read(File.join(out, "meta.txt"))
