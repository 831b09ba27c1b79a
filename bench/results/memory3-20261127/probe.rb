# Diagnostic probe (not a benchmark): the Rails bench app, 4x5, mold_boot; 300 sequential requests,
# URG, 300 more, then every process's memory by kind (PSS / Private_Dirty MiB).
# PROBE_CMD=plain: the master started as `ruby -Ilib -I<rack> exe/margay` (no Bundler in it);
# otherwise `bundle exec exe/margay`. Extra arguments go to margay.
require "net/http"
require "socket"
$LOAD_PATH.unshift "bench"
require "./bench/lib/refork_rails"
port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
env = { "BUNDLE_GEMFILE" => File.expand_path("bench/Gemfile") }
args = %W[-q -b tcp://127.0.0.1:#{port} -e production -w 4 -t 5:5 -C bench/results/memory3-20261127/configs/#{ENV.fetch("PROBE_CONFIG", "moldboot")}.rb] + ARGV + ["bench/apps/rails/config.ru"]
cmd = if ENV["PROBE_CMD"] == "plain"
        rack = Gem::Specification.find_by_name("rack").full_gem_path
        %W[ruby -Ilib -I#{rack}/lib exe/margay] + args
      else
        %w[bundle exec exe/margay] + args
      end
pid = Process.spawn(env, *cmd, %i[out err] => ["/tmp/m3_probe.log", "w"], pgroup: true)
MIB = ->(kib) { (kib / 1024.0).round(1) }
# "pss P priv D (kind pss/private, ...)" of one process, the kinds above 200 KiB.
def m(pid)
  kinds = MargayBench::ReforkRails.memory_by_kind(pid)
  total = ->(field) { MIB.(kinds.values.sum { |v| v[field] }) }
  big = kinds.filter_map { |name, v| "#{name} #{MIB.(v['pss'])}/#{MIB.(v['private_dirty'])}" if v["pss"] > 200 }
  "pss #{total.('pss')} priv #{total.('private_dirty')} (#{big.join(', ')})"
end
hit = ->(port, n) { n.times { Net::HTTP.get(URI("http://127.0.0.1:#{port}/")) rescue nil } }
120.times { break if (Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/")).code == "200" rescue false); sleep 0.5 }
puts "up: master #{m(pid)}"
hit.(port, 300)
Process.kill(:URG, pid); sleep 8
hit.(port, 300); sleep 2
tree = MargayBench::Procs.tree(pid)
tree.each { |p| puts "  #{File.read("/proc/#{p}/cmdline").tr("\0", " ")[0, 30]} #{m(p)}" }
puts "total PSS MiB #{(tree.sum { |p| MargayBench::ReforkRails.memory_by_kind(p).values.sum { |v| v['pss'] } } / 1024.0).round(1)}"
if ENV["HOLD"] then puts "HOLD #{pid}"; sleep Integer(ENV["HOLD"]) end
Process.kill(:TERM, pid); Process.wait(pid)
