# frozen_string_literal: true

require "test_helper"
require "margay/native"

# Health answered by the engine (ext/margay/core/health.c) over real sockets: the health
# listener (health_bind) answers while the only app thread is stuck in a request, and never
# hands anything to the app; health_check_path on the main listener is answered before the app
# and not counted; a drain (Server#drain) turns readiness to 503 and closes every connection
# after its response, an idle keep-alive one included, while requests are still served.
class HealthTest < Minitest::Test
  include Margay::TestHelper

  def health_port(server)
    server.health_listeners.first.url[/:(\d+)\z/, 1].to_i
  end

  def health_get(port, path, method: "GET")
    status, headers, body = exchange(port, "#{method} #{path} HTTP/1.1\r\nHost: x\r\n\r\n", head: method == "HEAD")
    [status, headers, body]
  end

  def exchange(port, raw, head: false)
    sock = TCPSocket.new("127.0.0.1", port)
    sock.write(raw)
    read_response(sock, head: head, timeout: 2)
  ensure
    sock&.close
  end

  def with_blocked_server(**settings)
    calls = Queue.new
    release = Queue.new
    started = Queue.new
    with_server(blocking_app(calls, release, started), min_threads: 1, max_threads: 1, **settings) do |_, port, server|
      blocker = Thread.new { raw_get(port, "/block") }
      pop_within(started)
      yield port, server, calls
    ensure
      release << true
      blocker&.join(5)
    end
  end

  def test_the_health_listener_answers_while_the_only_thread_is_in_a_request
    with_blocked_server(health_bind: "tcp://127.0.0.1:0") do |_, server, calls|
      hp = health_port(server)
      status, headers, body = health_get(hp, "/livez")
      assert_equal [200, "ok\n"], [status, body]
      assert_equal "close", headers["connection"]
      assert_equal "no-store", headers["cache-control"]
      assert_equal [200, "ready\n"], health_get(hp, "/readyz").values_at(0, 2)
      status, headers, body = health_get(hp, "/readyz", method: "HEAD")
      assert_equal [200, "6", ""], [status, headers["content-length"], body]
      assert_equal ["/block"], Array.new(calls.size) { calls.pop }, "no probe reached the app"
    end
  end

  def test_the_health_listener_refuses_what_it_does_not_answer
    with_blocked_server(health_bind: "tcp://127.0.0.1:0") do |_, server, calls|
      hp = health_port(server)
      assert_equal 404, health_get(hp, "/").first
      assert_equal 404, health_get(hp, "/livez/x").first
      status, headers, = health_get(hp, "/readyz", method: "POST")
      assert_equal [405, "GET, HEAD"], [status, headers["allow"]]
      assert_equal 400, exchange(hp, "GET /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").first
      assert_equal 400, exchange(hp, "GET /livez\x01 HTTP/1.1\r\nHost: x\r\n\r\n").first
      assert_equal 505, exchange(hp, "GET /livez HTTP/2.0\r\nHost: x\r\n\r\n").first
      assert_equal 431, exchange(hp, "GET /livez HTTP/1.1\r\nHost: x\r\nX-Big: #{'a' * 9000}\r\n\r\n").first
      assert_equal 414, exchange(hp, "GET /#{'a' * 3000} HTTP/1.1\r\nHost: x\r\n\r\n").first
      assert_equal 200, health_get(hp, "/livez").first, "still answering"
      assert_equal ["/block"], Array.new(calls.size) { calls.pop }, "nothing reached the app"
    end
  end

  def test_silent_health_clients_cannot_keep_a_probe_out
    with_server(HELLO, health_bind: "tcp://127.0.0.1:0") do |_, _, server|
      hp = health_port(server)
      silent = Array.new(80) { TCPSocket.new("127.0.0.1", hp) } # more than it serves at once: the oldest give way
      silent.first.write("GET /li")
      assert_equal 200, health_get(hp, "/livez").first, "answered once a silent one times out"
    ensure
      silent&.each(&:close)
    end
  end

  def test_metrics_answer_the_text_ruby_sets
    config = Margay::Configuration.new
    engine = Margay::Native::Engine.new(Margay::Native::Engine::SETTINGS.map { |key| config.public_send(key) }, {})
    health = TCPServer.new("127.0.0.1", 0)
    engine.add_health_listener(Margay::Native::Engine.respond_to?(:listener_io?) ? health : health.fileno) # the pure engine takes the IO
    engine.start
    assert_equal 404, health_get(health.local_address.ip_port, "/metrics").first, "404 until a snapshot is set"
  ensure
    engine&.close
    health&.close
  end

  # A standalone server publishes its Metrics.snapshot there (at most once a second).
  def test_metrics_are_this_servers_and_may_be_set
    with_server(HELLO, health_bind: "tcp://127.0.0.1:0") do |_, _, server|
      hp = health_port(server)
      Timeout.timeout(5) { sleep 0.02 until health_get(hp, "/metrics").first == 200 }
      assert_match(/^puma_max_threads\{index="0"\} 5$/, health_get(hp, "/metrics").last)
      text = "# TYPE puma_workers gauge\npuma_workers 1\n" * 2000
      server.engine.metrics_text = text
      status, headers, body = health_get(hp, "/metrics")
      assert_equal [200, text], [status, body]
      assert_equal "text/plain; version=0.0.4; charset=utf-8", headers["content-type"]
      server.engine.metrics_text = "x 1\n"
      assert_equal "x 1\n", health_get(hp, "/metrics").last
      assert_raises(ArgumentError) { server.engine.metrics_text = "a" * (4 * 1024 * 1024 + 1) }
    end
  end

  def test_health_check_path_is_answered_by_the_engine_before_the_app
    calls = Queue.new
    app = lambda do |env|
      calls << env["PATH_INFO"]
      [200, {}, ["app"]]
    end
    with_server(app, health_check_path: "/up") do |_, port, server|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("GET /up HTTP/1.1\r\nHost: x\r\n\r\n")
      status, headers, body = read_response(sock)
      assert_equal [200, "ready\n", nil], [status, body, headers["connection"]], "kept alive"
      sock.write("HEAD /up?probe=1 HTTP/1.1\r\nHost: x\r\n\r\nGET /up HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
      assert_equal [200, ""], read_response(sock, head: true).values_at(0, 2)
      status, headers, = read_response(sock)
      assert_equal [200, "keep-alive"], [status, headers["connection"]]
      sock.write("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nGET /upx HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal [200, "app"], read_response(sock).values_at(0, 2), "POST reaches the app"
      assert_equal [200, "app"], read_response(sock).values_at(0, 2)
      assert_equal %w[/up /upx], Array.new(calls.size) { calls.pop }
      assert_equal 2, server.engine.stats[:requests], "the probes are not counted"
    ensure
      sock&.close
    end
  end

  def test_health_check_path_in_fiber_mode
    skip_on_jruby "no fiber mode: it needs the C engine's epoll"
    skip "fiber mode needs epoll" if BACKEND == :poll
    with_server(HELLO, health_check_path: "/up", fiber_scheduler: true, max_threads: 1) do |_, port, server|
      status, _, body = exchange(port, "GET /up HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal [200, "ready\n"], [status, body]
      assert_equal [200, "hello"], exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").values_at(0, 2)
      assert_equal 1, server.engine.stats[:requests]
      assert server.engine.stats[:ready]
    end
  end

  def test_a_drain_turns_readiness_to_503_and_closes_every_connection_after_its_response
    with_server(HELLO, health_bind: "tcp://127.0.0.1:0", health_check_path: "/up") do |_, port, server|
      hp = health_port(server)
      idle = TCPSocket.new("127.0.0.1", port)
      idle.write("GET /before HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_nil read_response(idle)[1]["connection"], "kept alive before the drain"
      server.drain(60)
      assert_equal [503, "not ready\n"], health_get(hp, "/readyz").values_at(0, 2)
      assert_equal 200, health_get(hp, "/livez").first
      assert_predicate server.engine, :draining?
      idle.write("GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
      status, headers, body = read_response(idle)
      assert_equal [200, "close", "hello"], [status, headers["connection"], body], "the idle connection is answered"
      assert_equal "", read_all(idle, timeout: 2), "then closed"
      fresh = TCPSocket.new("127.0.0.1", port)
      fresh.write("GET /up HTTP/1.1\r\nHost: x\r\n\r\n")
      status, headers, = read_response(fresh)
      assert_equal [503, "close"], [status, headers["connection"]]
      status, headers, = exchange(port, "GET /new HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal [200, "close"], [status, headers["connection"]], "new connections are still served"
    ensure
      idle&.close
      fresh&.close
    end
  end

  # A cluster worker's engine (publish_idle) answers for the cluster: ready while a worker's
  # READY cell is set on the board and the board does not drain; /metrics is the board's text.
  def test_a_workers_health_answers_are_the_boards
    skip_on_jruby "no cluster: JRuby has no fork (Native::IdleBoard is the cluster's shared memory)"
    board = Margay::Native::IdleBoard.new(4)
    server, thread = start_worker_server(board, 1, health_bind: "tcp://127.0.0.1:0")
    hp = health_port(server)
    port = server.addresses.first[/:(\d+)\z/, 1].to_i
    refute board.ready?(0)
    assert_equal 200, health_get(hp, "/readyz").first
    assert_equal 404, health_get(hp, "/metrics").first
    board.metrics_text = "puma_workers 2\n"
    assert_equal [200, "puma_workers 2\n"], health_get(hp, "/metrics").values_at(0, 2)
    board.drain!
    assert_predicate board, :draining?
    assert_predicate server.engine, :draining?
    assert_equal 503, health_get(hp, "/readyz").first
    status, headers, = exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert_equal [200, "close"], [status, headers["connection"]]
  ensure
    server&.stop
    thread&.join(10)
    refute board.ready?(1), "a stopped worker is not ready" if board
  end
end
