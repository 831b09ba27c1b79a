# frozen_string_literal: true

require "test_helper"
require "tempfile"

# What RequestHandler does with the app's answer, over real sockets: each
# kind of body, early hints, the rack.response_finished callbacks, and the one
# place where failures become HTTP statuses. (Hijack: hijack_test.rb;
# request_timeout's 503: deadline_test.rb.)
class RequestHandlerTest < Minitest::Test
  include Margay::TestHelper

  def test_streamed_body_is_chunked_and_closed
    closed = Queue.new
    body = Object.new
    body.define_singleton_method(:each) { |&b| %w[one two three].each(&b) }
    body.define_singleton_method(:close) { closed << true }
    with_server(->(_env) { [200, {}, body] }) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      status, headers, data = read_response(sock)
      assert_equal [200, "chunked", "onetwothree"], [status, headers["transfer-encoding"], data]
      assert pop_within(closed)
    ensure
      sock&.close
    end
  end

  def test_streaming_body_with_call
    app = ->(_env) { [200, {}, ->(stream) { stream.write("a"); stream << "b"; stream.close }] }
    with_server(app) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "ab", read_response(sock)[2]
    ensure
      sock&.close
    end
  end

  def test_to_path_body_uses_the_file
    file = Tempfile.new("margay")
    file.write("x" * 100_000)
    file.flush
    body = Object.new
    body.define_singleton_method(:to_path) { file.path }
    body.define_singleton_method(:each) { |&b| b.call(File.read(file.path)) }
    with_server(->(_env) { [200, { "content-type" => "text/plain" }, body] }) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      status, headers, data = read_response(sock)
      assert_equal [200, "100000", 100_000], [status, headers["content-length"], data.bytesize]
    ensure
      sock&.close
      file.close!
    end
  end

  def test_app_error_is_500_and_server_carries_on
    app = ->(env) { env["PATH_INFO"] == "/boom" ? raise("boom") : HELLO.call(env) }
    with_server(app, environment: "production") do |_, port|
      raw = raw_exchange(port, "GET /boom HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 500 }, raw)
      refute_match(/boom/, raw.split("\r\n\r\n", 2).last, "no backtrace outside development")
      assert_match(/hello\z/, raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    end
  end

  # As in Puma, anything the app raises is a 500 and the thread serves on:
  # `exit` in app code, and exceptions outside StandardError (rack-timeout's
  # RequestTimeoutException < Exception). They used to end the pool thread
  # (in fiber mode, with every other request on it). Thread and fiber mode,
  # one thread, so the next requests need the same thread.
  class NotAnError < Exception; end # rubocop:disable Lint/InheritException

  def test_any_exception_from_the_app_is_a_500_and_the_thread_serves_on
    skip_on_jruby "no fiber mode: it needs the C engine's epoll"
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/exit" then exit(3)
      when "/exception" then raise NotAnError, "outside StandardError"
      else HELLO.call(env)
      end
    end
    [{}, { fiber_scheduler: true, event_backend: :auto }].each do |mode|
      with_server(app, environment: "production", min_threads: 1, max_threads: 1, **mode) do |_, port, server|
        2.times do
          assert_match(%r{\AHTTP/1.1 500 }, raw_get(port, "/exit"), mode.inspect)
          assert_match(%r{\AHTTP/1.1 500 }, raw_get(port, "/exception"), mode.inspect)
          assert_match(/hello\z/, raw_get(port, "/"), mode.inspect)
        end
        assert_equal 4, server.stats[:errors], mode.inspect
        assert_equal 1, server.stats[:threads], mode.inspect
      end
      assert_match(/NotAnError/, @last_server_log)
    end
  end

  # The app's code that runs after its call (body#close, rack.response_finished
  # callbacks, the lowlevel_error_handler) may raise anything too: logged, and
  # the thread serves on (an `exit` there used to end the server). Thread and
  # fiber mode, one thread.
  def test_any_exception_from_app_code_after_the_call_is_logged_and_the_thread_serves_on
    skip_on_jruby "no fiber mode: it needs the C engine's epoll"
    body = Object.new
    body.define_singleton_method(:each) { |&b| b.call("closed") }
    body.define_singleton_method(:close) { exit(4) }
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/close" then [200, {}, body]
      when "/finished"
        env["rack.response_finished"] << ->(*) { raise NotAnError, "in a callback" }
        [200, {}, ["finished"]]
      when "/handler" then raise "for the handler"
      else HELLO.call(env)
      end
    end
    handler = ->(_error, _env, _status) { exit(5) }
    [{}, { fiber_scheduler: true, event_backend: :auto }].each do |mode|
      with_server(app, environment: "production", min_threads: 1, max_threads: 1, lowlevel_error_handler: handler,
                       **mode) do |_, port, server|
        assert_match(%r{\AHTTP/1.1 200 .*\r\n6\r\nclosed\r\n0\r\n\r\n\z}m, raw_get(port, "/close"), mode.inspect)
        assert_match(/finished\z/, raw_get(port, "/finished"), mode.inspect)
        assert_match(%r{\AHTTP/1.1 500 }, raw_get(port, "/handler"), mode.inspect)
        assert_match(/hello\z/, raw_get(port, "/"), mode.inspect)
        assert_equal 1, server.stats[:threads], mode.inspect
      end
      log = @last_server_log
      ["body#close raised", "rack.response_finished callback raised", "lowlevel_error_handler raised"].each do |what|
        assert_includes log, what, mode.inspect
      end
    end
  end

  # An error whose #message raises (app code too): still a 500, logged, and
  # the thread serves on (logging it used to raise out of the error handling
  # and end the pool thread).
  def test_an_error_whose_message_raises_is_a_500
    bad = Class.new(StandardError) { def message = raise(ArgumentError, "no message") }
    app = ->(env) { env["PATH_INFO"] == "/bad" ? raise(bad) : HELLO.call(env) }
    %w[production development].each do |environment|
      with_server(app, environment: environment, min_threads: 1, max_threads: 1) do |_, port, server|
        assert_match(%r{\AHTTP/1.1 500 }, raw_get(port, "/bad"), environment)
        assert_match(/hello\z/, raw_get(port, "/"), environment)
        assert_equal 1, server.stats[:threads], environment
      end
      assert_match(/its #message raised ArgumentError/, @last_server_log)
    end
  end

  def test_response_header_injection_never_reaches_the_wire
    app = ->(_env) { [200, { "x-bad" => "a\r\nset-cookie: evil=1" }, ["x"]] }
    with_server(app, lint: false) do |_, port|
      raw = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 500 }, raw)
      refute_match(/evil/, raw)
    end
  end

  # App code runs while the head is built (a connection value's to_s); what it
  # raises is a 500, and the head's buffer (reserved for the whole array body,
  # here 4 MiB of address space each time) is freed, not leaked.
  def test_an_error_raised_while_the_head_is_built_frees_its_buffer
    bad = Object.new
    bad.define_singleton_method(:to_s) { raise "no text" }
    parts = Array.new(40) { ("x" * 60_000).freeze }.freeze
    app = ->(env) { env["PATH_INFO"] == "/bad" ? [200, { "connection" => [bad] }, parts.dup] : [200, {}, ["ok"]] }
    with_server(app, lint: false, min_threads: 1, max_threads: 1) do |_, port|
      3.times { assert_match(%r{\AHTTP/1.1 500 }, raw_get(port, "/bad")) } # the thread's arena, once
      before = vm_size
      30.times { assert_match(%r{\AHTTP/1.1 500 }, raw_get(port, "/bad")) }
      grown = vm_size - before
      assert_operator grown, :<, 48 << 20, "address space grew by #{grown >> 20} MiB over 30 failed heads"
      assert_match(/ok\z/, raw_get(port, "/ok"))
    end
  end

  def vm_size = File.read("/proc/self/status")[/^VmSize:\s+(\d+) kB/, 1].to_i * 1024

  def test_invalid_status_and_length_mismatch_are_500
    app = lambda do |env|
      env["PATH_INFO"] == "/status" ? [42, {}, ["x"]] : [200, { "content-length" => "10" }, ["short"]]
    end
    with_server(app, lint: false) do |_, port|
      %w[/status /length].each do |path|
        raw = raw_exchange(port, "GET #{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert_match(%r{\AHTTP/1.1 500 }, raw, path)
      end
    end
  end

  def test_body_closed_and_response_finished_called_on_error
    events = Queue.new
    body = Object.new
    body.define_singleton_method(:each) { |&_b| raise "each failed" }
    body.define_singleton_method(:close) { events << :closed }
    app = lambda do |env|
      env["rack.response_finished"] << ->(_env, _status, _headers, error) { events << [:finished, error&.message] }
      [200, {}, body]
    end
    with_server(app) do |_, port|
      raw = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      refute_match(/200 OK.*200 OK/m, raw)
      got = [pop_within(events), pop_within(events)]
      assert_includes got, :closed
      assert_includes got, [:finished, "each failed"]
    end
  end

  def test_early_hints
    app = lambda do |env|
      env["rack.early_hints"].call({ "link" => "</style.css>; rel=preload" })
      [200, {}, ["ok"]]
    end
    with_server(app) do |_, port|
      raw = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK}, raw)
    end
  end

  def test_app_error_in_development_shows_the_error_and_its_backtrace
    app = ->(_env) { raise ArgumentError, "boom in development" }
    with_server(app, environment: "development") do |_, port|
      raw = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 500 }, raw)
      body = raw.split("\r\n\r\n", 2).last
      assert_match(/\AArgumentError: boom in development\n\n.*request_handler_test\.rb:\d+/m, body)
      assert_match(%r{app error for GET /: ArgumentError: boom in development}, @server_log.string)
    end
  end

  def test_errors_are_counted_in_stats
    app = ->(env) { env["PATH_INFO"] == "/boom" ? raise("boom") : HELLO.call(env) }
    with_server(app, environment: "production") do |_, port, server|
      2.times { raw_exchange(port, "GET /boom HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") }
      raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      assert_equal 2, server.stats[:errors]
    end
  end

  def test_access_log_in_common_format
    log = StringIO.new
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], log_requests: true, event_backend: BACKEND)
    server = Margay::Server.new(Rack::Lint.new(HELLO), config, log: Margay::Log.new(out: log, err: log))
    server.bind
    thread = Thread.new { server.run }
    port = server.addresses.first[/\d+\z/].to_i
    raw_exchange(port, "GET /logged?a=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    server.stop
    thread.join(10)
    assert_match(%r{\A127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "GET /logged\?a=1 HTTP/1\.1" 200 - [\d.]+ms\n\z}, log.string)
  end
end
