# frozen_string_literal: true

$VERBOSE = true
require "minitest/autorun"
require "socket"
require "rack"
require "rack/lint"
require "stringio"
require "timeout"
require "tmpdir"
require "English"
require "margay"
require_relative "support/env"
require_relative "support/ports"
require_relative "support/watchdog"
require_relative "support/wire"

module Margay
  # JRuby runs the fast suite on the pure-Ruby engine (`.ci/jruby -S rake test:jruby`); what cannot
  # apply there skips with its reason, in a test (`skip_on_jruby "no fork"`) or for a whole class
  # (the same call in its body).
  module OnJRuby
    JRUBY = RUBY_ENGINE == "jruby"

    # In a test: skip it on JRuby. In a class body: skip every test of the class.
    def skip_on_jruby(reason)
      return unless JRUBY

      return skip("on JRuby: #{reason}") if is_a?(Minitest::Test)

      prepend(Module.new do
        define_method(:setup) { skip("on JRuby: #{reason}") }
        define_method(:teardown) { nil } # nothing was set up
      end)
    end
  end
  Minitest::Test.include(OnJRuby)
  Minitest::Test.extend(OnJRuby)

  # Shared helpers for the wire tests: a real server on 127.0.0.1:0 with the app
  # under Rack::Lint, raw sockets to talk to it, and the server's log kept for failures.
  module TestHelper
    include TestEnv
    include TestPorts

    # MARGAY_TEST_BACKEND=poll runs the wire tests on the portable poll(2) backend.
    BACKEND = (ENV["MARGAY_TEST_BACKEND"] || "auto").to_sym

    # Start a server for +app+ (wrapped in Rack::Lint unless lint: false), yield
    # [host, port, server, thread running it], stop it afterwards. Extra keywords are Configuration
    # settings. The server's log is in @server_log (a StringIO) meanwhile.
    def with_server(app, lint: true, binds: ["tcp://127.0.0.1:0"], **settings)
      log_io = @server_log = StringIO.new
      settings = { event_backend: BACKEND }.merge(settings)
      config = Margay::Configuration.new(binds: binds, silent: true, **settings)
      wrapped = lint ? Rack::Lint.new(app) : app
      server = Margay::Server.new(wrapped, config, log: Margay::Log.new(out: log_io, err: log_io))
      server.bind
      thread = Thread.new { server.run }
      thread.report_on_exception = true
      port = server.addresses.first[/:(\d+)\z/, 1].to_i
      yield "127.0.0.1", port, server, thread
    rescue Minitest::Assertion
      warn "--- server log ---\n#{log_io.string}" unless log_io.string.empty?
      raise
    ensure
      server&.stop
      # a failure inside the block is the one to report, not the stop it may have prevented
      thread&.join(10) || (thread&.kill && !$ERROR_INFO && flunk("server did not stop within 10 s"))
      @last_server_log = log_io&.string
    end

    # GET +path+ on a connection of its own (Connection: close); everything read.
    def raw_get(port, path = "/")
      raw_exchange(port, "GET #{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    end

    # Open a TCP connection, write +raw+ and read until the server closes or
    # +timeout+ passes. Returns everything read.
    def raw_exchange(port, raw, timeout: 5, host: "127.0.0.1")
      sock = TCPSocket.new(host, port)
      sock.write(raw)
      read_all(sock, timeout: timeout)
    ensure
      sock&.close
    end

    # Read until EOF or until +timeout+ passes without a byte.
    def read_all(sock, timeout: 5)
      data = +""
      loop do
        break unless sock.wait_readable(timeout)

        chunk = sock.read_nonblock(65_536, exception: false)
        break if chunk.nil?
        next if chunk == :wait_readable

        data << chunk
      end
      data
    rescue Errno::ECONNRESET
      data
    end

    # Read exactly one HTTP response from +sock+ (never a byte past it):
    # [status, headers, body]. Header names are lowercased; a header sent
    # more than once maps to an Array of its values. +head+: the request was
    # HEAD. Raises EOFError when the connection closes (or +timeout+ seconds
    # pass without a byte) before the response is complete.
    def read_response(sock, head: false, timeout: 5)
      res = Wire::Client.new(sock, timeout: timeout, buffered: false).read_response(head: head)
      raise EOFError, "connection closed before a response" if res.nil?
      raise EOFError, "connection closed inside the body" unless res.complete

      headers = {}
      res.fields.each { |name, value| (headers[name.downcase] ||= []) << value }
      [res.status, headers.transform_values { |v| v.size == 1 ? v.first : v }, res.body]
    rescue Wire::Timeout => e
      raise EOFError, e.message
    end

    # Yield the path of a config file holding +source+, removed afterwards.
    def with_config_file(source)
      Dir.mktmpdir("margay-config-") do |dir|
        path = File.join(dir, "margay.rb")
        File.write(path, source)
        yield path
      end
    end

    # An app whose GET /block waits for the test to let it go (a value pushed on +release+);
    # every call's path is pushed on +calls+, and +started+ hears of each /block.
    def blocking_app(calls, release, started)
      lambda do |env|
        calls << env["PATH_INFO"]
        if env["PATH_INFO"] == "/block"
          started << true
          release.pop
        end
        [200, { "content-type" => "text/plain" }, ["app"]]
      end
    end

    # A server serving HELLO as cluster worker +index+ of +board+ (Native::IdleBoard), with
    # +settings+, running in a thread: [server, thread], once the board says it is ready.
    def start_worker_server(board, index, **settings)
      config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], silent: true, event_backend: BACKEND, **settings)
      log = StringIO.new
      server = Margay::Server.new(HELLO, config, log: Margay::Log.new(out: log, err: log), idle_board: [board, index])
      server.bind
      thread = Thread.new { server.run }
      Timeout.timeout(5) { sleep 0.01 until board.ready?(index) }
      [server, thread]
    end

    # Queue#pop with a timeout (Ruby 3.1 has no pop(timeout:)); fails the test on timeout.
    def pop_within(queue, seconds = 5)
      Timeout.timeout(seconds) { queue.pop }
    rescue Timeout::Error
      flunk "nothing arrived within #{seconds}s"
    end

    # Wait until the server's kernel has acknowledged everything written on +sock+, a FIN
    # too (TCP_INFO's tcpi_unacked is 0): the server's event loop can see those bytes.
    # (JRuby gives no TCP_INFO: there it waits 0.2 s, loopback acknowledges well within that.)
    def wait_acked(sock, timeout: 5)
      return sleep(0.2) if OnJRuby::JRUBY

      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      until sock.getsockopt(Socket::IPPROTO_TCP, Socket::TCP_INFO).data.unpack("C8L5").last.zero?
        flunk "the server never acknowledged what was sent" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        sleep 0.005
      end
    end

    # A clock a test sets for the length of a block, for the units that take clock: (the real
    # Margay::Clock outside those blocks). Never stub Margay::Clock itself: minitest's stub
    # undefines and redefines the method, and a server thread still ticking (or any other
    # thread) that calls it then raises NoMethodError.
    class ManualClock
      def initialize
        @now = nil
      end

      def now
        @now || Margay::Clock.now
      end

      # The block's value, with #now at +now+ meanwhile.
      def at(now)
        was = @now
        @now = now
        yield
      ensure
        @now = was
      end
    end

    # A minimal Rack app: "hello" with the method and path echoed in a header.
    HELLO = lambda do |env|
      [200, { "content-type" => "text/plain", "x-path" => env["PATH_INFO"] }, ["hello"]]
    end
  end
end
