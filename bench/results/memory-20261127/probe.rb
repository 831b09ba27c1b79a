# Diagnostic probe (not a benchmark): boot the Rails bench app in a 4x5 cluster, 300 sequential
# requests, URG, 300 more, then each process's memory by kind (bench/lib/refork_rails.rb).
require "net/http"
$LOAD_PATH.unshift "bench"
require "./bench/lib/refork_rails"
extra = ARGV
port = 40000 + rand(2000)
env = { "BUNDLE_GEMFILE" => File.expand_path("bench/Gemfile") }
server = ENV.fetch("PROBE_SERVER", "margay")
cmd = if server == "puma-fork"
        %W[bundle exec puma -C - -q --fork-worker=0 -b tcp://127.0.0.1:#{port} -e production -w 4 -t 5:5 bench/apps/rails/config.ru]
      else
        %W[bundle exec exe/margay -q -b tcp://127.0.0.1:#{port} -e production -w 4 -t 5:5] + extra + ["bench/apps/rails/config.ru"]
      end
pid = Process.spawn(env, *cmd, out: "/tmp/probe.log", err: "/tmp/probe.log", pgroup: true)
def hit(port, n) = n.times { Net::HTTP.get(URI("http://127.0.0.1:#{port}/")) rescue nil }
60.times { break if (Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/")).code == "200" rescue false); sleep 0.5 }
hit(port, 300)
Process.kill(:URG, pid); sleep 6
hit(port, 300); sleep 2
tree = MargayBench::Procs.tree(pid)
tree.each do |p|
  k = MargayBench::ReforkRails.memory_by_kind(p)
  tot = k.values.sum { |v| v["pss"] }
  puts "#{File.read("/proc/#{p}/cmdline").tr("\0", " ")[0, 40]} PSS #{(tot / 1024.0).round(1)}: " + k.select { |_, v| v["pss"] > 200 }.map { |n, v| "#{n} #{(v['pss'] / 1024.0).round(1)}/#{(v['private_dirty'] / 1024.0).round(1)}" }.join(", ")
end
puts "total PSS MiB #{(tree.sum { |p| MargayBench::ReforkRails.memory_by_kind(p).values.sum { |v| v['pss'] } } / 1024.0).round(1)}"
if ENV["PROBE_HOLD"] then puts "HOLD #{pid}"; sleep Integer(ENV["PROBE_HOLD"]) end
Process.kill(:TERM, pid); Process.wait(pid)
