#!/usr/bin/env ruby
# frozen_string_literal: true

# Keep-alive balancing across cluster workers (issue: cluster mode).
# 2 workers x 2 threads; 3 clients loop 500 ms requests and 4 clients loop
# 1 ms requests, all over keep-alive (reconnecting when the server closes).
# Reports the fast requests' latency with balance_keepalive on and off.
#
#   ruby bench/balance.rb [seconds] [trials]   (default 10 s, 5 trials per mode)
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "socket"
require "margay"
require "margay/cluster"

SECONDS = Float(ARGV[0] || 10)
SLOW_CLIENTS = Integer(ENV.fetch("BALANCE_SLOW_CLIENTS", "3")) # 0: the baseline, no 500 ms requests

def start_cluster(balance)
  r, w = IO.pipe
  pid = fork do
    r.close
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], workers: 2, min_threads: 2, max_threads: 2,
                                       balance_keepalive: balance, quiet: true)
    app = lambda do |env|
      sleep(env["PATH_INFO"] == "/slow" ? 0.5 : 0.001)
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    cluster = Margay::Cluster.new(config, log: Margay::Log.new(quiet: true), app_loader: -> { app })
    cluster.bind
    w.puts cluster.addresses.first[/\d+\z/]
    w.close
    cluster.run
    exit!(0)
  end
  w.close
  port = Integer(r.gets)
  sleep 1 # workers boot
  [pid, port]
end

# One keep-alive client: returns latencies (s) of its requests.
def client(port, path, deadline)
  latencies = []
  sock = nil
  while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    begin
      sock ||= TCPSocket.new("127.0.0.1", port)
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      sock.write("GET #{path} HTTP/1.1\r\nHost: b\r\n\r\n")
      head = +""
      head << sock.readpartial(4096) until head.include?("\r\n\r\n")
      length = head[/content-length: (\d+)/i, 1].to_i
      body = head.split("\r\n\r\n", 2)[1]
      body << sock.readpartial(4096) while body.bytesize < length
      latencies << Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
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

def percentile(sorted, p)
  sorted[[(sorted.size * p).ceil - 1, 0].max]
end

def run_mode(balance)
  pid, port = start_cluster(balance)
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + SECONDS
  slow = Array.new(SLOW_CLIENTS) { Thread.new { client(port, "/slow", deadline) } }
  fast = Array.new(4) { Thread.new { client(port, "/", deadline) } }
  fast_lat = fast.flat_map(&:value).sort
  slow.each(&:join)
  Process.kill(:TERM, pid)
  Process.wait(pid)
  ms = ->(s) { (s * 1000).round(1) }
  { balance: balance, fast_requests: fast_lat.size, p50_ms: ms[percentile(fast_lat, 0.5)],
    p99_ms: ms[percentile(fast_lat, 0.99)], max_ms: ms[fast_lat.last] }
end

TRIALS = Integer(ARGV[1] || 5)
puts "#{TRIALS} trials of #{SECONDS}s per mode (where connections land at first differs per trial)"
puts "| balance_keepalive | trial p99s (1 ms requests) | median p99 | worst p99 | trials with p99 > 100 ms | max |"
puts "|---|---|---|---|---|---|"
[true, false].each do |balance|
  trials = Array.new(TRIALS) { run_mode(balance) }
  p99s = trials.map { |t| t[:p99_ms] }.sort
  label = balance ? "on (default)" : "off"
  puts "| #{label} | #{trials.map { |t| "#{t[:p99_ms]}" }.join(', ')} ms | #{p99s[p99s.size / 2]} ms | " \
       "#{p99s.last} ms | #{p99s.count { |v| v > 100 }}/#{TRIALS} | #{trials.map { |t| t[:max_ms] }.max} ms |"
end
