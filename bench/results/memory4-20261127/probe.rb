# frozen_string_literal: true

# Diagnostic probe (not a benchmark; run from the tree's root, as root for pages.rb): the Rails
# bench app, 4 workers x 5 threads, with config C (default configs/mpc.rb) and environment from
# ARGV (KEY=VALUE...): wrk 10 s, URG, wrk 8 s (bench/refork.rb's load), then pages.rb and the
# per-kind breakdown of every process.
$LOAD_PATH.unshift "bench"
require "./bench/lib/refork_rails"
include MargayBench # rubocop:disable Style/MixinUsage
dir = File.expand_path(__dir__)
env = Env.clean.merge("BUNDLE_GEMFILE" => File.expand_path("bench/Gemfile")).merge(ARGV.to_h { |kv| kv.split("=", 2) })
port = Env.free_port
config = File.join(dir, "configs", "#{ENV.fetch('C', 'mpc')}.rb")
argv = Servers.margay(port, ReforkRails::APP, workers: 4, threads: "5:5", extra: ["-C", config])
pid = Process.spawn(env, *argv, unsetenv_others: true, pgroup: true, in: File::NULL, %i[out err] => ["/tmp/m4_probe.log", "w"])
out = "/tmp/m4_probe_out"
FileUtils.mkdir_p(out)
begin
  ReforkRails.wait_ready(pid, port)
  url = "http://127.0.0.1:#{port}/"
  ReforkRails.load(url, 10, out, "warm")
  before = ReforkRails.workers(pid)
  Process.kill(:URG, pid)
  ReforkRails.wait_refork(pid, before)
  sleep 2
  p ReforkRails.load(url, 8, out, "after")
  sleep 2
  tree = Procs.tree(pid)
  system("ruby", File.join(dir, "pages.rb"), *tree.map(&:to_s))
  mib = ->(k) { (k / 1024.0).round(1) }
  tree.each do |p|
    kinds = ReforkRails.memory_by_kind(p)
    puts "#{p} #{ReforkRails.cmdline(p)[0, 24]}: pss #{mib.(kinds.values.sum { |v| v['pss'] })} " +
         kinds.filter_map { |k, v| "#{k} #{mib.(v['pss'])}/#{mib.(v['private_dirty'])}" if v["pss"] > 100 }.join(", ")
  end
  puts "total PSS MiB #{mib.(tree.sum { |p| ReforkRails.memory_by_kind(p).values.sum { |v| v['pss'] } })}"
ensure
  ReforkRails.stop(pid)
end
