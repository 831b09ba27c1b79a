#!/usr/bin/env ruby
# frozen_string_literal: true

# bench/slow_service.rb: the slow upstream of the rails-pg-slow workload (issue 13). Every
# request gets a small JSON answer --delay-ms (50) after its head arrived, then the
# connection is closed (the service closes first, so TIME_WAIT stays on its side and the
# app's ephemeral ports are not used up).
#
# It shares the 2 CPUs with the server under test, so it must cost next to nothing per
# request: one thread, one epoll set (nio4r, already in the bench bundle for Puma), no
# thread or fiber per waiting request, and since every request waits the same delay the
# timers are a FIFO (a deque, no heap). The harness measures its CPU during every run
# and reports it.
#
#   BUNDLE_GEMFILE=bench/Gemfile bundle exec ruby bench/slow_service.rb --port 9000 [--delay-ms 50]
#
# Prints "slow_service listening on 127.0.0.1:PORT" once it accepts connections; stops on
# TERM/INT.
require "nio"
require "optparse"
require "socket"

module MargayBench
  # The event loop of bench/slow_service.rb (see the top of the file).
  class SlowService
    BODY = %({"service":"slow","delay_ms":%d}\n)
    HEAD_LIMIT = 16 * 1024

    def initialize(port:, delay_ms:)
      @delay = delay_ms / 1000.0
      @server = TCPServer.new("127.0.0.1", port)
      @server.listen(4096)
      body = format(BODY, delay_ms)
      @response = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: #{body.bytesize}\r\n" \
                  "connection: close\r\n\r\n#{body}".b.freeze
      @selector = NIO::Selector.new
      @selector.register(@server, :r)
      @heads = {} # socket => bytes of its request head so far
      @due = []   # [due time, socket], in due order (every delay is the same)
      @served = 0
    end

    def port
      @server.addr[1]
    end

    def run
      @stop = false
      until @stop
        timeout = @due.empty? ? 1.0 : [@due.first[0] - now, 0].max
        @selector.select(timeout) { |m| m.io.equal?(@server) ? accept : read(m) }
        answer_due
      end
    end

    def stop
      @stop = true
      @selector.wakeup
    end

    private

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def accept
      loop do
        sock = @server.accept_nonblock(exception: false)
        break if sock == :wait_readable

        @heads[sock] = +""
        @selector.register(sock, :r)
      end
    end

    def read(monitor)
      sock = monitor.io
      data = sock.read_nonblock(4096, exception: false)
      return if data == :wait_readable
      return drop(sock) if data.nil? || @heads[sock].bytesize > HEAD_LIMIT

      head = @heads[sock] << data
      return unless head.include?("\r\n\r\n")

      @selector.deregister(sock)
      @heads.delete(sock)
      @due << [now + @delay, sock]
    rescue SystemCallError, IOError
      drop(sock)
    end

    def answer_due
      t = now
      while (first = @due.first) && first[0] <= t
        @due.shift
        sock = first[1]
        begin
          sock.write_nonblock(@response, exception: false) # ~150 bytes into an empty socket buffer
          @served += 1
        rescue SystemCallError, IOError
          nil
        ensure
          sock.close
        end
      end
    end

    def drop(sock)
      @selector.deregister(sock) if @selector.registered?(sock)
      @heads.delete(sock)
      sock.close unless sock.closed?
    end
  end
end

if $PROGRAM_NAME == __FILE__
  port = 0
  delay_ms = 50
  OptionParser.new do |o|
    o.banner = "usage: bench/slow_service.rb [--port N] [--delay-ms MS]"
    o.on("--port N", Integer, "listen on 127.0.0.1:N (default: any free port)") { |v| port = v }
    o.on("--delay-ms MS", Integer, "delay before each answer (default 50)") { |v| delay_ms = v }
  end.parse!
  service = MargayBench::SlowService.new(port: port, delay_ms: delay_ms)
  %w[TERM INT].each { |sig| trap(sig) { service.stop } }
  $stdout.puts "slow_service listening on 127.0.0.1:#{service.port}"
  $stdout.flush
  service.run
end
