# Diagnostic probe (not a benchmark): the Rails bench app, 4x5, mold_boot; the master's memory by kind at start,
# once up, after 300 sequential requests, then URG, 300 more, and every process. XS/XG: experiment switches
# (MG_X_MASTER_SETTLE: Heap.settle in the master before its first fork, "c" with GC.compact; MG_X_MASTER_GC: the
# same once every worker booted) that existed only in the experiment copies, not in the committed tree.
require "net/http"
$LOAD_PATH.unshift "bench"
require "./bench/lib/refork_rails"
port = 42000 + rand(2000)
env = { "BUNDLE_GEMFILE" => File.expand_path("bench/Gemfile"), "MG_X_MASTER_SETTLE" => ENV["XS"], "MG_X_MASTER_GC" => ENV["XG"] }
cmd = %W[bundle exec exe/margay -q -b tcp://127.0.0.1:#{port} -e production -w 4 -t 5:5 -C bench/results/memory-20261127/configs/moldboot.rb bench/apps/rails/config.ru]
pid = Process.spawn(env, *cmd, out: "/tmp/m2_probe.log", err: "/tmp/m2_probe.log", pgroup: true)
def m(p)
  k = MargayBench::ReforkRails.memory_by_kind(p)
  "pss #{(k.values.sum { |v| v['pss'] } / 1024.0).round(1)} priv #{(k.values.sum { |v| v['private_dirty'] } / 1024.0).round(1)} (" + k.select { |_, v| v["pss"] > 200 }.map { |n, v| "#{n} #{(v['pss'] / 1024.0).round(1)}/#{(v['private_dirty'] / 1024.0).round(1)}" }.join(", ") + ")"
end
def hit(port, n) = n.times { Net::HTTP.get(URI("http://127.0.0.1:#{port}/")) rescue nil }
t0 = Time.now
sleep 0.5; puts "t=0.5 master #{m(pid)}"
60.times { break if (Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/")).code == "200" rescue false); sleep 0.5 }
puts "up t=#{(Time.now - t0).round(1)} master #{m(pid)}"
sleep 5; puts "t=#{(Time.now - t0).round(1)} master #{m(pid)}"
hit(port, 300)
puts "after 300 t=#{(Time.now - t0).round(1)} master #{m(pid)}"
Process.kill(:URG, pid); sleep 6
hit(port, 300); sleep 2
puts "after refork t=#{(Time.now - t0).round(1)} master #{m(pid)}"
tree = MargayBench::Procs.tree(pid)
tree.each { |p| puts "  #{File.read("/proc/#{p}/cmdline").tr("\0", " ")[0, 30]} #{m(p)}" }
puts "total PSS MiB #{(tree.sum { |p| MargayBench::ReforkRails.memory_by_kind(p).values.sum { |v| v['pss'] } } / 1024.0).round(1)}"
if ENV["HOLD"] then puts "HOLD #{pid}"; sleep Integer(ENV["HOLD"]) end
Process.kill(:TERM, pid); Process.wait(pid)
