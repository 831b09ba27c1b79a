#!/usr/bin/env ruby
# frozen_string_literal: true

# Slow-client scenario of the core benchmark (see bench/README.md).
#
# Against one server on loopback, at the same time:
#   * TRICKLE connections that send a request head one byte per second (never completing
#     it during the run),
#   * NON_READERS connections that each ask for GET /big (16 MiB with
#     bench/apps/slow_clients.ru) and never read a byte of the answer,
#   * one measuring client that sends sequential keep-alive GETs of the hello route for
#     DURATION seconds and records each request's latency.
#
# A server whose threads are held by slow clients shows it in the measuring client's
# latencies. Everything is bounded in time: each measured request gives up after
# --request-timeout (counted as an error, latency recorded as the timeout), and the whole
# run stops after settle + duration + request timeout + 10 s at the latest. All sockets
# are closed at the end.
#
#   ruby bench/slow_clients.rb --port 9292 [--trickle 200] [--non-readers 20] \
#     [--duration 20] [--settle 2] [--request-timeout 5] [--json]
#
# Output: a short human summary on stderr; with --json, one JSON object on stdout.

require "json"
require "optparse"
require "socket"
require_relative "lib/stats"

module MargayBench
  # The slow-client load generator and latency probe.
  class SlowClients
    LOOPBACK = %w[127.0.0.1 ::1 localhost].freeze
    TRICKLE_INTERVAL = 1.0

    Options = Struct.new(:host, :port, :trickle, :non_readers, :duration, :settle,
                         :request_timeout, :path, :big_path, :json, :quiet, keyword_init: true)

    def self.parse(argv)
      opts = Options.new(host: "127.0.0.1", port: nil, trickle: 200, non_readers: 20, duration: 20.0,
                         settle: 2.0, request_timeout: 5.0, path: "/", big_path: "/big",
                         json: false, quiet: false)
      OptionParser.new do |o|
        o.banner = "usage: #{$PROGRAM_NAME} --port PORT [options]"
        o.on("--host HOST", "server address, loopback only (default 127.0.0.1)") { |v| opts.host = v }
        o.on("--port PORT", Integer, "server port (required)") { |v| opts.port = v }
        o.on("--trickle N", Integer, "connections trickling a request head at 1 byte/s (200)") { |v| opts.trickle = v }
        o.on("--non-readers N", Integer, "connections requesting the big body and never reading (20)") do |v|
          opts.non_readers = v
        end
        o.on("--duration S", Float, "seconds of measured sequential requests (20)") { |v| opts.duration = v }
        o.on("--settle S", Float, "seconds between opening the slow clients and measuring (2)") { |v| opts.settle = v }
        o.on("--request-timeout S", Float, "give up on one measured request after S seconds (5)") do |v|
          opts.request_timeout = v
        end
        o.on("--path PATH", "route of the measured requests (/)") { |v| opts.path = v }
        o.on("--big-path PATH", "route the non-readers request (/big)") { |v| opts.big_path = v }
        o.on("--json", "print the result as one JSON object on stdout") { opts.json = true }
        o.on("--quiet", "no progress on stderr") { opts.quiet = true }
      end.parse!(argv)
      raise OptionParser::MissingArgument, "--port" unless opts.port
      raise OptionParser::InvalidArgument, "--host must be loopback (#{LOOPBACK.join(', ')})" unless LOOPBACK.include?(opts.host)
      raise OptionParser::InvalidArgument, "--duration must be > 0" unless opts.duration.positive?

      opts
    end

    def initialize(opts)
      @o = opts
      @host_header = opts.host.include?(":") ? "[#{opts.host}]:#{opts.port}" : "#{opts.host}:#{opts.port}"
      @trickle = [] # [socket, bytes_sent]
      @trickle_closed = 0
      @trickle_connect_errors = 0
      @non_readers = []
      @non_reader_errors = 0
      @non_readers_receiving = 0
      @stop = false
      @mutex = Mutex.new
    end

    def run
      started = now
      @hard_deadline = started + @o.settle + @o.duration + @o.request_timeout + 10 + (@o.trickle + @o.non_readers) * 0.05
      open_non_readers
      open_trickle
      trickler = Thread.new { trickle_loop }
      log "slow clients: #{@trickle.size} trickling, #{@non_readers.size} non-reading; settling #{@o.settle}s"
      sleep(@o.settle)
      measured = measure
      # A non-reader with bytes waiting proves the server did start sending it the big body.
      @non_readers_receiving = @non_readers.count { |sock| sock.wait_readable(0) }
      @stop = true
      trickler.join(TRICKLE_INTERVAL * 3) || trickler.kill
      result(measured, now - started)
    ensure
      @stop = true
      close_all
    end

    private

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def log(msg)
      warn("[slow_clients] #{msg}") unless @o.quiet
    end

    def connect(timeout)
      Socket.tcp(@o.host, @o.port, connect_timeout: timeout)
    end

    # The request a trickling client sends, long enough never to complete during the run.
    def trickle_request(index)
      needed = (@o.settle + @o.duration + @o.request_timeout + 30).ceil
      head = "GET #{@o.path}?trickle=#{index} HTTP/1.1\r\nHost: #{@host_header}\r\nUser-Agent: margay-bench-slow-client\r\n"
      pad = [needed - head.bytesize, 16].max
      "#{head}X-Trickle: #{'a' * pad}\r\n\r\n"
    end

    def open_trickle
      @o.trickle.times do |i|
        break if now > @hard_deadline

        sock = connect(5)
        @trickle << [sock, trickle_request(i), 0]
      rescue SystemCallError, IOError, SocketError
        @trickle_connect_errors += 1
      end
    end

    def open_non_readers
      request = "GET #{@o.big_path} HTTP/1.1\r\nHost: #{@host_header}\r\nUser-Agent: margay-bench-non-reader\r\n\r\n"
      @o.non_readers.times do
        family = @o.host.include?(":") ? Socket::AF_INET6 : Socket::AF_INET
        sock = Socket.new(family, Socket::SOCK_STREAM, 0)
        # A small receive window before connect, so the 16 MiB answer cannot fit in kernel buffers.
        sock.setsockopt(Socket::SOL_SOCKET, Socket::SO_RCVBUF, 65_536)
        sock.connect(Socket.sockaddr_in(@o.port, @o.host == "localhost" ? "127.0.0.1" : @o.host))
        sock.write(request)
        @non_readers << sock
      rescue SystemCallError, IOError, SocketError
        sock&.close
        @non_reader_errors += 1
      end
    end

    # One byte per second on every trickling connection; a connection the server closes
    # (or answers, e.g. 408) is counted and dropped.
    def trickle_loop
      until @stop || now > @hard_deadline
        tick = now
        @mutex.synchronize do
          @trickle.reject! do |entry|
            sock, request, sent = entry
            closed = server_closed?(sock)
            unless closed || sent >= request.bytesize
              begin
                entry[2] += sock.write_nonblock(request.byteslice(sent, 1), exception: false) == 1 ? 1 : 0
              rescue SystemCallError, IOError
                closed = true
              end
            end
            if closed
              @trickle_closed += 1
              sock.close
            end
            closed
          end
        end
        remaining = TRICKLE_INTERVAL - (now - tick)
        sleep(remaining) if remaining.positive?
      end
    end

    def server_closed?(sock)
      return false unless sock.wait_readable(0)

      data = sock.read_nonblock(4096, exception: false)
      data.nil? || data.is_a?(String) # EOF, or the server answered the unfinished head
    rescue SystemCallError, IOError
      true
    end

    # Sequential keep-alive GETs until the duration is over. Returns the list of samples.
    def measure
      samples = []
      sock = nil
      request = "GET #{@o.path} HTTP/1.1\r\nHost: #{@host_header}\r\nUser-Agent: margay-bench-probe\r\n\r\n"
      finish = now + @o.duration
      last_log = now
      while now < finish && now < @hard_deadline
        t0 = now
        deadline = t0 + @o.request_timeout
        begin
          sock ||= connect(@o.request_timeout)
          sock.write(request)
          status, keep = read_response(sock, deadline)
          samples << { latency: now - t0, error: status == 200 ? nil : "status" }
          unless keep
            sock.close
            sock = nil
          end
        rescue Timeout => e
          samples << { latency: @o.request_timeout, error: e.message }
          sock&.close
          sock = nil
        rescue SystemCallError, IOError, EOFError, SocketError => e
          samples << { latency: now - t0, error: e.is_a?(Errno::ECONNREFUSED) ? "connect" : "read" }
          sock&.close
          sock = nil
          sleep(0.01) # do not spin on a refusing server
        end
        if now - last_log >= 5
          last_log = now
          log format("%d requests, %d errors so far", samples.size, samples.count { |s| s[:error] })
        end
      end
      samples
    ensure
      sock&.close
    end

    class Timeout < StandardError; end

    # Read one response; returns [status, keep_alive?]. Raises Timeout past +deadline+.
    def read_response(sock, deadline)
      buf = +""
      until (head_end = buf.index("\r\n\r\n"))
        buf << read_some(sock, deadline)
      end
      head = buf[0, head_end]
      status = head[/\AHTTP\/1\.[01] (\d{3})/, 1].to_i
      length = head[/^content-length:\s*(\d+)/i, 1]
      raise EOFError, "response without content-length" unless length

      body_have = buf.bytesize - head_end - 4
      body_have += read_some(sock, deadline).bytesize while body_have < length.to_i
      [status, !head.match?(/^connection:\s*close/i)]
    end

    def read_some(sock, deadline)
      loop do
        left = deadline - now
        raise Timeout, "timeout" unless left.positive? && sock.wait_readable(left)

        data = sock.read_nonblock(65_536, exception: false)
        raise EOFError, "closed" if data.nil?
        return data unless data == :wait_readable
      end
    end

    def result(samples, elapsed)
      lat = samples.map { |s| s[:latency] }.sort
      errors = samples.filter_map { |s| s[:error] }.tally
      ms = ->(v) { v&.*(1000.0)&.round(3) }
      {
        "host" => @o.host, "port" => @o.port,
        "trickle_requested" => @o.trickle, "trickle_opened" => @o.trickle - @trickle_connect_errors,
        "trickle_closed_by_server" => @trickle_closed, "trickle_open_at_end" => @trickle.size,
        "non_readers_requested" => @o.non_readers, "non_readers_opened" => @non_readers.size,
        "non_readers_receiving" => @non_readers_receiving,
        "duration_s" => @o.duration, "settle_s" => @o.settle, "request_timeout_s" => @o.request_timeout,
        "elapsed_s" => elapsed.round(2),
        "requests" => samples.size, "ok" => samples.count { |s| s[:error].nil? },
        "errors" => errors.values.sum, "errors_by_kind" => errors,
        "latency_ms" => {
          "p50" => ms.call(Stats.percentile(lat, 50)), "p90" => ms.call(Stats.percentile(lat, 90)),
          "p99" => ms.call(Stats.percentile(lat, 99)), "max" => ms.call(lat.last),
          "mean" => ms.call(Stats.mean(lat))
        }
      }
    end

    def close_all
      @mutex.synchronize do
        @trickle.each { |sock, _, _| sock.close unless sock.closed? }
        @trickle.clear
      end
      @non_readers.each { |sock| sock.close unless sock.closed? }
      @non_readers.clear
    end
  end
end

if $PROGRAM_NAME == __FILE__
  begin
    opts = MargayBench::SlowClients.parse(ARGV)
  rescue OptionParser::ParseError => e
    warn e.message
    exit 64
  end
  res = MargayBench::SlowClients.new(opts).run
  lat = res["latency_ms"]
  warn format("[slow_clients] %d requests (%d ok, %d errors %s) p50 %s ms, p90 %s ms, p99 %s ms, max %s ms; " \
              "trickling open at end %d/%d",
              res["requests"], res["ok"], res["errors"], res["errors_by_kind"].inspect,
              lat["p50"], lat["p90"], lat["p99"], lat["max"], res["trickle_open_at_end"], res["trickle_opened"])
  puts JSON.generate(res) if opts.json
end
