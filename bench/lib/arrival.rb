#!/usr/bin/env ruby
# frozen_string_literal: true

# bench/lib/arrival.rb: a constant-arrival-rate (open model) HTTP/1.1 load client, used by
# bench/run.rb for "capacity under an SLO".
#
#   ruby bench/lib/arrival.rb --port 8080 --rate 500 --duration 5 [--path /] [--json]
#
# Request i is *due* at t0 + i/rate, whether or not earlier requests have been answered.
# A pool of --connections keep-alive connections (one thread each) takes due requests in
# order; a request that has to wait for a free connection waits in the queue, and its
# latency is measured from the moment it was due, not from when it was sent (so a
# stalling server is not excused by the client slowing down: no coordinated omission).
# Requests not sent by the end of the run plus --timeout are counted as "dropped".
#
# Why our own client: wrk and ab are closed-loop (a new request only after an answer), and
# h2load's --rps paces each connection but measures latency from the actual send, so a
# server that falls behind makes the client slow down instead of the latency grow. wrk2
# (which corrects for this) is not packaged in Debian. This client is plain Ruby: it tops
# out at a few thousand requests/s on one core, which bounds the rates bench/run.rb asks for.
require "json"
require "optparse"
require "socket"
require_relative "stats"

module MargayBench
  class ArrivalClient
    Result = Struct.new(:ok, :status, :error, :due, :sent, :done)

    def initialize(host:, port:, path:, rate:, duration:, connections:, timeout:)
      @host = host
      @port = port
      @path = path
      @rate = rate.to_f
      @duration = duration.to_f
      @connections = connections
      @timeout = timeout.to_f
      @request = "GET #{path} HTTP/1.1\r\nHost: #{host}:#{port}\r\nUser-Agent: margay-bench-arrival\r\n\r\n".b
    end

    def run
      total = (@rate * @duration).floor
      queue = Queue.new
      t0 = now + 0.2
      total.times { |i| queue << (t0 + i / @rate) }
      queue.close
      deadline = t0 + @duration + @timeout
      results = []
      lock = Mutex.new
      threads = Array.new([@connections, total].min) do
        Thread.new do
          mine = []
          conn = nil
          while (due = queue.pop)
            break if now > deadline

            wait = due - now
            sleep wait if wait.positive?
            begin
              conn ||= connect
              res = one(conn, due)
            rescue SystemCallError, IOError => e
              res = Result.new(false, nil, e.class.name, due, nil, now)
            end
            mine << res
            next if res.ok && res.error.nil?

            conn&.close rescue nil # rubocop:disable Style/RescueModifier
            conn = nil
          end
          conn&.close rescue nil # rubocop:disable Style/RescueModifier
          lock.synchronize { results.concat(mine) }
        end
      end
      threads.each { |t| t.join([deadline - now + 2, 0.1].max) || t.kill }
      summarize(total, results, t0)
    end

    private

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def connect
      s = Socket.tcp(@host, @port, connect_timeout: @timeout)
      s.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
      s
    end

    # Sends one request and reads one response; Result with times relative to due.
    def one(sock, due)
      sent = now
      sock.write(@request)
      limit = sent + @timeout
      buf = +"".b
      head_end = nil
      until (head_end = buf.index("\r\n\r\n"))
        return Result.new(false, nil, "timeout", due, sent, now) unless fill(sock, buf, limit)
      end
      head = buf[0, head_end]
      body = buf[(head_end + 4)..]
      status = head[/\AHTTP\/1\.[01] (\d{3})/, 1].to_i
      if (len = head[/^content-length:\s*(\d+)/i, 1])
        need = len.to_i
        while body.bytesize < need
          return Result.new(false, status, "timeout", due, sent, now) unless fill(sock, body, limit)
        end
      elsif head =~ /^transfer-encoding:\s*chunked/i
        until body.include?("\r\n0\r\n\r\n") || body.start_with?("0\r\n\r\n")
          return Result.new(false, status, "timeout", due, sent, now) unless fill(sock, body, limit)
        end
      else
        nil while fill(sock, body, limit) # close-delimited
        return Result.new((200..399).cover?(status), status, "close", due, sent, now)
      end
      keep = head !~ /^connection:\s*close/i
      Result.new((200..399).cover?(status), status, keep ? nil : "close", due, sent, now)
    end

    # Appends what is readable before +limit+; false on timeout or EOF.
    def fill(sock, buf, limit)
      left = limit - now
      return false if left <= 0
      return false unless sock.wait_readable(left)

      buf << sock.readpartial(262_144)
      true
    rescue EOFError
      false
    end

    def summarize(total, results, t0)
      ok = results.select(&:ok)
      lat = ok.map { |r| (r.done - r.due) * 1000.0 }.sort
      service = ok.map { |r| (r.done - r.sent) * 1000.0 }.sort
      timeouts = results.count { |r| r.error == "timeout" }
      errors = results.count { |r| !r.ok }
      last_done = results.map(&:done).max || t0
      {
        "target_rate" => @rate, "duration_s" => @duration, "connections" => @connections,
        "timeout_s" => @timeout, "path" => @path, "scheduled" => total, "completed" => results.size,
        "ok" => ok.size, "errors" => errors, "timeouts" => timeouts,
        "non2xx" => results.count { |r| r.status && !(200..399).cover?(r.status) },
        "dropped" => total - results.size,
        "achieved_rate" => (ok.size / [last_done - t0, @duration].max).round(1),
        "latency_ms" => %w[50 90 95 99].to_h { |p| ["p#{p}", Stats.percentile(lat, p.to_f)&.round(3)] }
                                       .merge("max" => lat.last&.round(3)),
        "service_ms" => { "p50" => Stats.percentile(service, 50.0)&.round(3), "p99" => Stats.percentile(service, 99.0)&.round(3) }
      }
    end
  end
end

if $PROGRAM_NAME == __FILE__
  o = { host: "127.0.0.1", path: "/", duration: 5, connections: 256, timeout: 5 }
  json = false
  OptionParser.new do |p|
    p.banner = "usage: ruby bench/lib/arrival.rb --port PORT --rate R [options]"
    p.on("--host HOST", "loopback only (default 127.0.0.1)") { |v| o[:host] = v }
    p.on("--port PORT", Integer) { |v| o[:port] = v }
    p.on("--path PATH", "default /") { |v| o[:path] = v }
    p.on("--rate R", Float, "requests per second (arrivals)") { |v| o[:rate] = v }
    p.on("--duration S", Float, "seconds of arrivals (default 5)") { |v| o[:duration] = v }
    p.on("--connections N", Integer, "max requests in flight = connections (default 256)") { |v| o[:connections] = v }
    p.on("--timeout S", Float, "per-request timeout (default 5)") { |v| o[:timeout] = v }
    p.on("--json", "print one JSON object") { json = true }
  end.parse!
  abort "arrival.rb: --port and --rate are required" unless o[:port] && o[:rate]
  abort "arrival.rb: loopback only" unless %w[127.0.0.1 ::1 localhost].include?(o[:host])
  abort "arrival.rb: at most 60 s" if o[:duration] > 60
  res = MargayBench::ArrivalClient.new(**o).run
  puts json ? JSON.generate(res) : JSON.pretty_generate(res)
end
