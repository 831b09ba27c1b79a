# Usage: ruby run.rb SERVER(margay|puma) LABEL [workers] [conns] [seconds] [extra server flags...]
# From the worktree root. Starts SERVER with rails_probe.ru (Rails bench app, production, SQLite),
# runs wrk keep-alive, writes $OUT/LABEL/{wrk.txt,meta.txt,<pid>.log}.
require "fileutils"
require "socket"
server, label, workers, conns, secs, *extra = ARGV
workers = (workers || 1).to_i; conns = (conns || 32).to_i; secs = (secs || 6).to_i
root = File.expand_path("../../..", __dir__)
out = File.join(ENV.fetch("OUT", "/tmp/railsprobe"), label)
FileUtils.rm_rf(out); FileUtils.mkdir_p(out)
port = (s = TCPServer.new("127.0.0.1", 0); p = s.addr[1]; s.close; p)
app = File.expand_path("rails_probe.ru", __dir__)
env = { "PROBE_DIR" => out, "BUNDLE_GEMFILE" => File.join(root, "bench/Gemfile"), "RACK_ENV" => "production",
        "RAILS_ENV" => "production", "BENCH_RAILS_DB" => "/tmp/railsprobe/rails.sqlite3" }.merge(ENV.select { |k, _| k.start_with?("RUBY_GC_") })
threads = ENV.fetch("THREADS", "0:5")
cmd = if server == "puma"
        %W[bundle exec puma -b tcp://127.0.0.1:#{port} -e production -C - -q -w #{workers} -t #{threads}] + extra + [app]
      else
        %W[bundle exec exe/margay -b tcp://127.0.0.1:#{port} -e production -q -w #{workers} -t #{threads} --queue-time-header] + extra + [app]
      end
pid = Process.spawn(env, *cmd, chdir: root, pgroup: true, out: File.join(out, "server.out"), err: [:child, :out])
def kids(pid) = Dir.glob("/proc/[0-9]*/stat").filter_map { |f| (x = File.read(f).split(") ", 2).last.split; x[2].to_i == pid && File.basename(File.dirname(f)).to_i != pid ? File.basename(File.dirname(f)).to_i : nil) rescue nil }
up = false
120.times { (TCPSocket.new("127.0.0.1", port).close; up = true; break) rescue sleep(0.25) }
raise "server did not start: #{File.read(File.join(out, 'server.out'))}" unless up
sleep 2 # workers booted
# warm up: the first requests compile templates and fill caches
`wrk -t2 -c#{conns} -d2s http://127.0.0.1:#{port}/ 2>&1`
sleep 0.5
cpu = ->(pids) { pids.sum { |q| (f = File.read("/proc/#{q}/stat").split(") ", 2).last.split; f[11].to_i + f[12].to_i) rescue 0 } }
stat = -> { File.readlines("/proc/stat").first.split[1..].map(&:to_i) }
s0 = stat.call; w = kids(pid); w = [pid] if w.empty? || workers.zero?; c0 = cpu.call(w)
load0 = File.read("/proc/loadavg").split.first
t0 = Process.clock_gettime(Process::CLOCK_REALTIME)
wrk = `wrk -t2 -c#{conns} -d#{secs}s --timeout 10s --latency http://127.0.0.1:#{port}/`
t1 = Process.clock_gettime(Process::CLOCK_REALTIME)
s1 = stat.call; c1 = cpu.call(w)
Process.kill("TERM", -pid) rescue nil
Process.wait(pid) rescue nil
tot = s1.zip(s0).map { |a, b| a - b }
busy = tot.sum - tot[3] - tot[4]
File.write(File.join(out, "wrk.txt"), wrk)
File.write(File.join(out, "meta.txt"), "server #{server}\ncmd #{cmd.join(' ')}\nload #{load0}\nt0 #{t0}\nt1 #{t1}\n" \
                                        "cpu_busy_frac #{busy.fdiv(tot.sum).round(3)} (of 2 cores)\nworkers_cpu_s #{(c1 - c0) / 100.0}\n")
puts wrk
puts File.read(File.join(out, "meta.txt"))
