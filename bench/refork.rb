#!/usr/bin/env ruby
# frozen_string_literal: true

# Reforking and memory. Two modes:
#
#   ruby bench/refork.rb [cache_mib]
#     Synthetic: total PSS of a 4-worker cluster serving an app that builds a
#     large cache lazily (on its first request), without and with reforking.
#
#   ruby bench/refork.rb rails [--seconds S] [--servers a,b] [--growth MIN] [--out DIR]
#     The Rails bench app (bench/apps/rails, SQLite), 4 workers x 5 threads, side
#     by side in one run: Margay (preload, refork on URG), Puma 8 --preload, Puma 8
#     --fork-worker=0 (refork on URG). For each: warm-up load, PSS of every
#     process, URG (where it reforks), S seconds more load, PSS again, with
#     throughput and p99 of both loads. --growth MIN: then MIN minutes of load,
#     PSS sampled each minute. Variants of Margay through environment settings:
#     servers named margay+ENV=VALUE (e.g. margay+MALLOC_ARENA_MAX=8); margay-lazy+C=FILE
#     is Margay without --preload, with the config FILE (mold_boot true, say). The
#     report has each process's memory by kind of mapping (brk heap, arenas, ...).
#
# PSS (proportional set size, /proc/PID/smaps_rollup) splits shared pages
# between the processes sharing them, so the sum over a tree is the real cost.
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "socket"
require "margay"
require "margay/cluster"

CACHE_MIB = ARGV[0] == "rails" ? 0 : Integer(ARGV[0] || 64)
WORKERS = 4

APP = lambda do |_env|
  # Built on first use in each process, like a template or routing cache.
  $cache ||= Array.new(CACHE_MIB * 16) { |i| ("%08d" % i) * 8192 }.freeze # 64 KiB strings
  [200, { "content-type" => "text/plain" }, ["#{Process.pid} #{$cache.size}"]]
end

def start(log_r, log_w)
  pid = fork do
    log_r.close
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], workers: WORKERS, max_threads: 2, quiet: false)
    log = Margay::Log.new(out: log_w, err: log_w)
    cluster = Margay::Cluster.new(config, log: log, app_loader: -> { APP })
    cluster.bind
    log_w.puts "port #{cluster.addresses.first[/\d+\z/]}"
    cluster.run
    exit!(0)
  end
  log_w.close
  pid
end

def wait_for(log, buffer, pattern, count = 1, timeout = 60)
  deadline = Time.now + timeout
  until buffer.scan(pattern).size >= count
    raise "timed out waiting for #{pattern}" if Time.now > deadline

    buffer << log.readpartial(65_536) if log.wait_readable(1)
  end
end

def get(port)
  sock = TCPSocket.new("127.0.0.1", port)
  sock.write("GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
  sock.read.split("\r\n\r\n", 2).last
ensure
  sock&.close
end

# Hit the cluster until every worker answered with a full cache.
def warm(port)
  seen = {}
  2000.times do
    Array.new(8) { Thread.new { get(port) } }.map(&:value).each do |body|
      pid, size = body.split.map(&:to_i)
      seen[pid] = size
    end
    break if seen.size >= WORKERS && seen.values.all? { |s| s == CACHE_MIB * 16 }
  end
  seen.keys
end

def pss_kib(pid)
  File.read("/proc/#{pid}/smaps_rollup")[/^Pss:\s+(\d+) kB/, 1].to_i
rescue SystemCallError
  0
end

def tree(master)
  pids = Dir.glob("/proc/[0-9]*").map { |d| File.basename(d).to_i }
  pids.select do |pid|
    cmd = File.read("/proc/#{pid}/cmdline") rescue ""
    pid == master || cmd.start_with?("margay: ")
  end
end

def measure(refork)
  log_r, log_w = IO.pipe
  master = start(log_r, log_w)
  buffer = +""
  wait_for(log_r, buffer, /port \d+/)
  port = Integer(buffer[/port (\d+)/, 1])
  wait_for(log_r, buffer, /booted/, WORKERS)
  warm(port)
  if refork
    Process.kill(:URG, master)
    wait_for(log_r, buffer, /mold ready/)
    wait_for(log_r, buffer, /booted/, WORKERS * 2)
    warm(port) # the re-forked workers answer from the inherited cache
  end
  sleep 1
  procs = tree(master)
  total = procs.sum { |pid| pss_kib(pid) }
  Process.kill(:TERM, master)
  Process.wait(master)
  { refork: refork, processes: procs.size, pss_mib: (total / 1024.0).round(1) }
end

if ARGV.first == "rails"
  require_relative "lib/refork_rails"
  exit MargayBench::ReforkRails.main(ARGV.drop(1))
end

without = measure(false)
with = measure(true)
saving = 100.0 * (without[:pss_mib] - with[:pss_mib]) / without[:pss_mib]
puts "| mode | processes | total PSS |"
puts "|---|---|---|"
puts "| no reforking (#{WORKERS} workers + master) | #{without[:processes]} | #{without[:pss_mib]} MiB |"
puts "| reforked from a warm mold, which then serves again (#{WORKERS} workers + master) | #{with[:processes]} | #{with[:pss_mib]} MiB |"
puts "| saving | | #{saving.round(1)}% |"
