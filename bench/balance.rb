#!/usr/bin/env ruby
# frozen_string_literal: true

# Keep-alive balancing across cluster workers (issue: cluster mode).
#
# 2 workers x T threads serve bench/apps/balance.ru. S clients loop 500 ms
# requests and F clients loop 1 ms requests, all over keep-alive connections
# (reconnecting when the server closes one). Reports the 1 ms requests'
# latency for Margay with balance_keepalive on, Margay with it off, and Puma
# (-w 2 -t T:T), side by side, several trials each (where connections land
# at first differs per trial).
#
# A scenario is "T:S:F". The default ones keep S + F <= 2T: there is always a
# thread free somewhere in the cluster for every 1 ms request, so a 1 ms
# request that waits is waiting for balance, not for capacity. (With S + F
# over 2T the 1 ms requests queue for the free threads whatever the server
# does: e.g. 2:3:4 leaves one free thread for four closed-loop clients, and
# their p99 is about four service times.)
#
#   ruby bench/balance.rb [seconds] [trials]   (default 6 s, 5 trials)
#   ruby bench/balance.rb --report bench/results/balance-<time>.json   (the table again)
#   BALANCE_SCENARIOS=2:2:2,2:3:1,4:3:4 BALANCE_SERVERS=margay,margay-off,puma ruby bench/balance.rb
#
# Needs bundle install --gemfile bench/Gemfile (Puma) and a compiled Margay.
# Writes bench/results/balance-<UTC time>.json and prints a Markdown table.
require "json"
require "socket"
require "tmpdir"
require_relative "lib/procs"
require_relative "lib/servers"
require_relative "lib/stats"

ROOT = MargayBench::ROOT
SECONDS = ARGV.first == "--report" ? 0 : Float(ARGV[0] || 6)
TRIALS = ARGV.first == "--report" ? 0 : Integer(ARGV[1] || 5)
SCENARIOS = ENV.fetch("BALANCE_SCENARIOS", "1:1:1,2:2:2,2:3:1,4:3:4").split(",").map do |s|
  threads, slow, fast = s.split(":").map { |v| Integer(v) }
  { threads: threads, slow: slow, fast: fast }
end
SERVERS = ENV.fetch("BALANCE_SERVERS", "margay,margay-off,puma").split(",")
APP = "bench/apps/balance.ru"

def command(server, port, threads, tmp)
  common = { quiet: "-s", workers: 2, threads: "#{threads}:#{threads}" }
  case server
  when "margay" then MargayBench::Servers.margay(port, APP, **common)
  when "margay-off"
    conf = File.join(tmp, "off.rb")
    File.write(conf, "balance_keepalive false\n")
    MargayBench::Servers.margay(port, APP, **common, extra: ["-C", conf])
  when "puma" then MargayBench::Servers.puma(port, APP, **common)
  else abort "unknown server #{server} (margay, margay-off, puma)"
  end
end

def get_ok?(port)
  sock = TCPSocket.new("127.0.0.1", port)
  sock.write("GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
  sock.read.start_with?("HTTP/1.1 200")
rescue SystemCallError, IOError
  false
ensure
  sock&.close
end

def start(server, threads, tmp)
  port = MargayBench::Env.free_port
  log = File.join(tmp, "#{server}.log")
  pid = Process.spawn({ "BUNDLE_GEMFILE" => File.join(ROOT, "bench/Gemfile") }, *command(server, port, threads, tmp),
                      chdir: ROOT, pgroup: true, out: log, err: log)
  deadline = Time.now + 30
  until get_ok?(port)
    raise "#{server} did not start (#{log}):\n#{File.read(log)}" if Time.now > deadline || Process.wait(pid, Process::WNOHANG)

    sleep 0.1
  end
  sleep 1.5 # the second worker boots
  [pid, port]
end

def stop(pid)
  Process.kill(:TERM, -pid)
  Process.wait(pid)
rescue Errno::ESRCH, Errno::ECHILD
  nil
end

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

# One keep-alive client: returns latencies (s) of its requests.
def client(port, path, deadline)
  latencies = []
  sock = nil
  while now < deadline
    begin
      sock ||= TCPSocket.new("127.0.0.1", port)
      started = now
      sock.write("GET #{path} HTTP/1.1\r\nHost: b\r\n\r\n")
      head = +""
      head << sock.readpartial(4096) until head.include?("\r\n\r\n")
      length = head[/content-length: (\d+)/i, 1].to_i
      body = head.split("\r\n\r\n", 2)[1]
      body << sock.readpartial(4096) while body.bytesize < length
      latencies << now - started
      if head.match?(/^connection: close/i)
        sock.close
        sock = nil
      end
    rescue EOFError, SystemCallError
      sock&.close
      sock = nil
    end
  end
  sock&.close
  latencies
end

def trial(server, scenario, tmp)
  pid, port = start(server, scenario[:threads], tmp)
  deadline = now + SECONDS
  slow = Array.new(scenario[:slow]) { Thread.new { client(port, "/slow", deadline) } }
  fast = Array.new(scenario[:fast]) { Thread.new { client(port, "/", deadline) } }
  lat = fast.flat_map(&:value).sort
  slow_count = slow.sum { |t| t.value.size }
  ms = ->(s) { (s * 1000).round(1) }
  { fast_requests: lat.size, slow_requests: slow_count, p50_ms: ms[MargayBench::Stats.percentile(lat, 50)],
    p99_ms: ms[MargayBench::Stats.percentile(lat, 99)], max_ms: ms[lat.last] }
ensure
  stop(pid) if pid
end

# The Markdown table of +results+ (as written to the JSON file).
def report(results, trials)
  puts "| threads × 2 workers | 500 ms clients | 1 ms clients | server | trial p99s | median p50 | median p99 | " \
       "worst p99 | trials with p99 > 100 ms | max | 1 ms requests per trial |"
  puts "|---|---|---|---|---|---|---|---|---|---|---|"
  results.each do |r|
    p99s = r[:trials].map { |t| t[:p99_ms] }
    counts = r[:trials].map { |t| t[:fast_requests] }
    median = ->(values) { MargayBench::Stats.median(values)&.round(2) }
    puts "| #{r[:threads]} | #{r[:slow]} | #{r[:fast]} | #{r[:server]} | #{p99s.join(', ')} ms | " \
         "#{median[r[:trials].map { |t| t[:p50_ms] }]} ms | #{median[p99s]} ms | #{p99s.max} ms | " \
         "#{p99s.count { |v| v > 100 }}/#{trials} | #{r[:trials].map { |t| t[:max_ms] }.max} ms | " \
         "#{counts.min}–#{counts.max} |"
  end
end

if ARGV.first == "--report" # ruby bench/balance.rb --report bench/results/balance-....json
  data = JSON.parse(File.read(ARGV[1]), symbolize_names: true)
  report(data[:results], data[:trials])
  exit
end

results = []
Dir.mktmpdir("margay-balance") do |tmp|
  SCENARIOS.each do |scenario|
    SERVERS.each do |server|
      trials = Array.new(TRIALS) { trial(server, scenario, tmp) }
      results << scenario.merge(server: server, trials: trials)
      warn "#{scenario.values.join(':')} #{server}: p99 #{trials.map { |t| t[:p99_ms] }.join(', ')} ms"
    end
  end
end

stamp = Time.now.utc.strftime("%Y%m%dT%H%M%SZ")
File.write(File.join(ROOT, "bench/results/balance-#{stamp}.json"),
           JSON.pretty_generate({ seconds: SECONDS, trials: TRIALS, results: results }))
puts "#{TRIALS} trials of #{SECONDS} s per server and scenario; latency of the 1 ms requests (results: " \
     "bench/results/balance-#{stamp}.json)"
puts
report(results, TRIALS)
