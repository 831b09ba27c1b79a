# frozen_string_literal: true

require "test_helper"
require "margay/pure"
require "tempfile"

module Margay
  # The pure-Ruby engine (lib/margay/pure/) over real sockets. On JRuby through
  # the whole server (Native::Engine is the pure engine there); on MRI through
  # the request handler with the pure engine behind it (the server keeps the C one).
  class PureEngineTest < Minitest::Test
    include TestHelper

    # The pool side RequestHandler#serve asks: never idle out, never leave.
    class Pool
      def idle_budget = nil
      def busy! = nil
      def idle! = nil
      def leave?(_thread) = false
      def grow_on_demand? = false
      def retire?(_thread) = false
    end

    # A pure engine, not started, on a listener of its own: [engine, listener, port, config].
    def pure_engine(**settings)
      config = Configuration.new(binds: ["tcp://127.0.0.1:0"], silent: true, **settings)
      listener = TCPServer.new("127.0.0.1", 0)
      port = listener.local_address.ip_port
      engine = Pure::Engine.new(config.to_h.values_at(*Pure::Engine::SETTINGS),
                                Server::RequestHandler.env_template(config))
      engine.add_listener(listener, false, "127.0.0.1", port.to_s)
      [engine, listener, port, config]
    end

    def serve(app, **settings, &block)
      return with_server(app, **settings) { |_host, port| yield port } if RUBY_ENGINE == "jruby"

      engine, listener, port, config = pure_engine(**settings)
      engine.start
      log = Log.new(out: StringIO.new, err: (@server_log = StringIO.new))
      handler = Server::RequestHandler.new(Rack::Lint.new(app), engine, config, log, { errors: 0 })
      threads = Array.new(2) { Thread.new { handler.serve(Pool.new) } }
      block.call(port)
    ensure
      engine&.stop
      threads&.each { |t| t.join(5) || t.kill }
      engine&.close
      listener&.close
    end

    HELLO = ->(_env) { [200, { "content-type" => "text/plain" }, ["Hello"]] }
    ECHO = lambda do |env|
      body = env["rack.input"].read
      [200, { "content-type" => "text/plain" }, ["#{env['REQUEST_METHOD']} #{env['CONTENT_LENGTH']} #{body}"]]
    end

    def test_get
      serve(HELLO) do |port|
        response = raw_get(port)
        assert_match(%r{\AHTTP/1\.1 200 OK\r\n}, response)
        assert_match(/^content-length: 5\r$/, response)
        assert_match(/^connection: close\r$/, response)
        assert response.end_with?("\r\n\r\nHello")
      end
    end

    def test_keep_alive_and_pipelining
      serve(HELLO) do |port|
        sock = TCPSocket.new("127.0.0.1", port)
        sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        first = sock.readpartial(4096)
        assert_match(/\AHTTP\/1\.1 200 OK.*Hello\z/m, first)
        sock.write("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        rest = read_all(sock)
        assert_equal 2, rest.scan("HTTP/1.1 200 OK").size, rest
        assert_match(/connection: close\r\ndate: [^\r]+\r\n\r\nHello\z/, rest)
      ensure
        sock&.close
      end
    end

    def test_post_content_length
      serve(ECHO) do |port|
        response = raw_exchange(port, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
        assert response.end_with?("POST 5 hello"), response
      end
    end

    def test_chunked_body
      serve(ECHO) do |port|
        response = raw_exchange(port, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" \
                                      "Connection: close\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n")
        assert response.end_with?("POST 5 hello"), response
      end
    end

    def test_malformed_heads_get_a_status_and_a_close
      serve(HELLO, max_request_target: 64, max_header_size: 1024) do |port|
        { "GET / HTTP/1.1\r\n\r\n" => 400, # no Host
          "GET / HTTP/1.1\nHost: x\r\n\r\n" => 400, # bare LF
          "GET / HTTP/1.1\r\nHost: x\r\n bad\r\n\r\n" => 400, # obs-fold
          "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx" => 400,
          "GET /#{'a' * 100} HTTP/1.1\r\nHost: x\r\n\r\n" => 414,
          "GET / HTTP/1.1\r\nHost: x\r\nX-Big: #{'a' * 2000}\r\n\r\n" => 431,
          "GET / HTTP/2.0\r\nHost: x\r\n\r\n" => 505,
          "CONNECT x:1 HTTP/1.1\r\nHost: x\r\n\r\n" => 501 }.each do |raw, status|
          response = raw_exchange(port, raw)
          assert_match(/\AHTTP\/1\.1 #{status} /, response, raw.inspect)
          assert_match(/^connection: close\r$/, response)
        end
      end
    end

    def test_env_values
      seen = nil
      app = lambda do |env|
        seen = env.slice("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "REQUEST_URI", "SERVER_PROTOCOL",
                         "SERVER_NAME", "SERVER_PORT", "REMOTE_ADDR", "HTTP_X_A", "HTTP_COOKIE", "rack.url_scheme")
        seen["dropped"] = env.key?("HTTP_X_B")
        [204, {}, []]
      end
      serve(app) do |port|
        response = raw_exchange(port, "GET /p%20q?a=1 HTTP/1.1\r\nHost: example.com:8080\r\nX-A: 1\r\nX-A: 2\r\n" \
                                      "Cookie: c=1\r\nCookie: d=2\r\nX_B: no\r\nConnection: close\r\n\r\n")
        assert_match(/\AHTTP\/1\.1 204 /, response)
        assert_equal({ "REQUEST_METHOD" => "GET", "PATH_INFO" => "/p%20q", "QUERY_STRING" => "a=1",
                       "REQUEST_URI" => "/p%20q?a=1", "SERVER_PROTOCOL" => "HTTP/1.1", "SERVER_NAME" => "example.com",
                       "SERVER_PORT" => "8080", "REMOTE_ADDR" => "127.0.0.1", "HTTP_X_A" => "1, 2",
                       "HTTP_COOKIE" => "c=1; d=2", "rack.url_scheme" => "http", "dropped" => false }, seen)
      end
    end

    def test_streamed_body_is_chunked_on_http11_and_close_delimited_on_http10
      app = ->(_env) { [200, {}, Enumerator.new { |y| y << "ab" << "cd" }] }
      serve(app) do |port|
        response = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert_match(/^transfer-encoding: chunked\r$/, response)
        assert response.end_with?("\r\n\r\n2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n"), response
        old = raw_exchange(port, "GET / HTTP/1.0\r\n\r\n")
        refute_match(/transfer-encoding/, old)
        assert old.end_with?("\r\n\r\nabcd"), old
      end
    end

    def test_header_timeout_answers_408
      serve(HELLO, header_timeout: 1) do |port|
        response = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n", timeout: 10)
        assert_match(/\AHTTP\/1\.1 408 /, response)
      end
    end

    SLOW = lambda do |env|
      sleep 0.3 if env["PATH_INFO"] == "/slow"
      [200, { "content-type" => "text/plain" }, [env["PATH_INFO"]]]
    end

    # The start of the next request arrives while the app runs: the pool thread reads it after
    # the response, finds it incomplete and gives it back to the reactor, which finishes it.
    def test_request_begun_during_the_one_before_is_finished_by_the_reactor
      serve(SLOW) do |port|
        sock = TCPSocket.new("127.0.0.1", port)
        sock.write("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        sleep 0.1
        sock.write("GET /next HTTP/1.1\r\nHo")
        assert_match(/\AHTTP\/1\.1 200 OK.*\/slow\z/m, sock.readpartial(4096))
        sleep 0.2
        sock.write("st: x\r\nConnection: close\r\n\r\n")
        assert_match(/\AHTTP\/1\.1 200 OK.*\/next\z/m, read_all(sock))
      ensure
        sock&.close
      end
    end

    # ... and header_timeout still runs for it.
    def test_request_begun_during_the_one_before_times_out
      serve(SLOW, header_timeout: 1) do |port|
        sock = TCPSocket.new("127.0.0.1", port)
        sock.write("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        sleep 0.1
        sock.write("GET /next HTTP/1.1\r\nHo")
        assert_match(/\AHTTP\/1\.1 200 OK.*\/slow\z/m, sock.readpartial(4096))
        assert_match(/\AHTTP\/1\.1 408 /, read_all(sock))
      ensure
        sock&.close
      end
    end

    def test_app_error_is_a_500_and_the_engine_serves_on
      calls = 0
      app = lambda do |_env|
        calls += 1
        raise "boom" if calls == 1

        [200, {}, ["ok"]]
      end
      serve(app) do |port|
        assert_match(/\AHTTP\/1\.1 500 /, raw_get(port))
        assert raw_get(port).end_with?("ok")
      end
    end

    def test_file_body_and_early_hints
      tmp = Tempfile.new("pure")
      tmp.write("from a file")
      tmp.close
      file = tmp.path
      body = Struct.new(:to_path) do
        def each = yield(File.read(to_path))
      end
      app = lambda do |env|
        env["rack.early_hints"].call({ "link" => "</a.css>; rel=preload" })
        [200, { "content-type" => "text/plain" }, body.new(file)]
      end
      serve(app) do |port|
        response = raw_get(port)
        assert_match(%r{\AHTTP/1\.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\nHTTP/1\.1 200 OK\r\n}, response)
        assert_match(/^content-length: 11\r$/, response)
        assert response.end_with?("\r\n\r\nfrom a file"), response
      end
    ensure
      tmp&.close!
    end

    def test_body_past_max_body_size_is_a_413
      serve(ECHO, max_body_size: 4) do |port|
        response = raw_exchange(port, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789")
        assert_match(/\AHTTP\/1\.1 413 /, response)
        chunked = raw_exchange(port, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" \
                                     "a\r\n0123456789\r\n0\r\n\r\n")
        assert_match(/\AHTTP\/1\.1 413 /, chunked)
      end
    end

    # stats[:connections] and max_connections count every open connection wherever it is:
    # watched by the reactor, its complete request waiting for a thread, held by one; a
    # hijacked one leaves the count, a closed one too. No pool threads here: the test takes.
    def test_connections_count_every_open_connection
      engine, listener, port, = pure_engine(max_connections: 3)
      engine.start
      ask = -> { TCPSocket.new("127.0.0.1", port).tap { |s| s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n") } }
      idle = TCPSocket.new("127.0.0.1", port)
      asking = Array.new(2) { ask.call }
      Timeout.timeout(5) { sleep 0.01 until engine.backlog == 2 && engine.stats[:connections] == 3 }
      asking << ask.call
      sleep 0.3
      assert_equal [3, 2], [engine.stats[:connections], engine.backlog], "no accept past max_connections"

      first, = engine.next_request
      assert_equal 3, engine.stats[:connections], "a connection held by a thread counts"
      io, = engine.hijack(first)
      io.close
      Timeout.timeout(5) { sleep 0.01 until engine.backlog == 2 }
      assert_equal 3, engine.stats[:connections], "the hijacked one left, the waiting client came in"
      2.times { engine.abort(engine.next_request.first) }
      assert_equal 1, engine.stats[:connections]
      idle.close
      Timeout.timeout(5) { sleep 0.01 until engine.stats[:connections].zero? }
    ensure
      engine&.stop
      engine&.close
      listener&.close
      [idle, *asking].each { |s| s&.close unless s&.closed? }
    end

    # The server closes its listeners as soon as Engine#stop returns. It returns once the reactor
    # has let go of them: on JRuby a listener closed while the reactor's selector lets go of it
    # may keep its socket open, new clients waiting in its backlog, until the selector's next
    # wait, and there is none. Here the reactor is slow to let go; the stop waits for it, and a
    # client right after the stop and the close is refused at once.
    def test_stop_returns_once_the_reactor_let_go_of_the_listeners
      engine, listener, port, = pure_engine
      engine.singleton_class.prepend(Module.new do
        def release_listeners
          sleep 0.3
          super
        end
      end)
      engine.start
      raw_get(port) # the reactor is in its wait
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      engine.stop
      assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :>=, 0.3
      listener.close
      assert_raises(Errno::ECONNREFUSED) { Socket.tcp("127.0.0.1", port, connect_timeout: 2).close }
    ensure
      engine&.stop
      engine&.close
      listener&.close unless listener&.closed?
    end
  end
end
