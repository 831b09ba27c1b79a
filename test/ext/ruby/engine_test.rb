# frozen_string_literal: true

require "test_helper"
require "margay/margay_native"

# Margay::Native::Engine (ext/margay/ruby/engine.c, settings.c, request.c, respond.c, stream.c, cluster.c): its
# methods, and who may touch a connection: a request's handles (early hints,
# hijack, streams) stop working once its response is done, however many
# connections reuse the same descriptor afterwards; and a stopping server does
# not wait for connections that never send anything.
class EngineTest < Minitest::Test
  include Margay::TestHelper

  # What lib/ may call, with arities: the Engine's whole Ruby API.
  API = {
    add_listener: -1, start: 0, next_request: -1, stop: -1, stopping?: 0, abort: 1, hijack: 1, error_response: 2, stats: 0, backlog: 0, queue_look: 0,
    close: 0, respond: 4, respond_file: 4, stream_start: 3, stream_write: 2, stream_finish: 1, flush: 1, tunnel_read: 2,
    early_hints: 2, response_started?: 1, detach_idle: 2, adopt: 2, publish_idle: 2, others_waiting: 0,
    handoff_quota: 0, saturated_ms: 0, starved?: 0, add_health_listener: -1, "busy_threads=": 1, drain: 0, draining?: 0, "metrics_text=": 1,
    request_objects: 2
  }.freeze

  def test_the_engine_api
    engine = Margay::Native::Engine
    methods = engine.public_instance_methods(false).to_h { |name| [name, engine.instance_method(name).arity] }
    assert_equal API, methods
    assert_equal 2, engine.instance_method(:initialize).arity
    assert engine::SETTINGS.frozen?
  end

  # A limit larger than the engine can count means "no smaller limit": it is
  # clamped, never truncated (a truncated max_keepalive_requests of 2**33 was
  # 0) and never a RangeError at start.
  def test_large_limits_are_clamped
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], max_connections: 10**10,
                                       max_keepalive_requests: 2**33)
    default = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"])
    big, small = [config, default].map do |c|
      Margay::Native::Engine.new(Margay::Native::Engine::SETTINGS.map { |key| c.public_send(key) }, {})
    end
    assert_equal small.stats[:max_connections], big.stats[:max_connections], "capped at the descriptor limit's default"
    with_server(->(_env) { [200, {}, ["ok"]] }, max_keepalive_requests: 2**33) do |_addr, port, _server|
      TCPSocket.open("127.0.0.1", port) do |s|
        2.times do
          s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
          assert_equal 200, read_response(s)[0], "keep-alive still allowed"
        end
      end
    end
  ensure
    [big, small].each { |e| e&.close }
  end

  # kept_alive counts the connections kept alive after a response, which a cluster worker weighs
  # against its threads to choose how many new clients to take (core/accept.c): not one whose
  # request has not come yet, nor one answered and closing.
  def test_kept_alive_counts_only_connections_kept_alive_after_a_response
    with_server(->(_env) { [200, {}, ["ok"]] }) do |_addr, port, server|
      engine = nil
      Timeout.timeout(5) { sleep 0.01 until (engine = server.engine) }
      quiet = TCPSocket.new("127.0.0.1", port)
      Timeout.timeout(5) { sleep 0.01 until engine.stats[:connections] == 1 }
      assert_equal 0, engine.stats[:kept_alive], "a client whose request has not come"
      kept = TCPSocket.new("127.0.0.1", port)
      kept.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal 200, read_response(kept)[0]
      assert_equal 1, engine.stats[:kept_alive]
      closing = TCPSocket.new("127.0.0.1", port)
      closing.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      assert_equal 200, read_response(closing)[0]
      assert_equal 1, engine.stats[:kept_alive], "answered and closing"
      kept.close
      Timeout.timeout(5) { sleep 0.01 until engine.stats[:connections] <= 2 && engine.stats[:kept_alive].zero? }
      [quiet, closing].each(&:close)
    end
  end

  # starved? is the pool's on-demand growth signal: a request waits (here in the listener's
  # backlog) while no thread waits for work; not while a thread waits, nor when the only
  # request is the one being served.
  def test_starved_when_a_request_waits_and_no_thread_does
    gate = Queue.new
    with_server(->(_env) { gate.pop && [200, {}, ["ok"]] }, min_threads: 1, max_threads: 1) do |_addr, port, server|
      engine = nil
      Timeout.timeout(5) { sleep 0.01 until (engine = server.engine) }
      refute engine.starved?, "a thread waits"
      first = TCPSocket.new("127.0.0.1", port)
      first.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      Timeout.timeout(5) { sleep 0.01 until engine.saturated_ms.positive? }
      refute engine.starved?, "the only request is being served"
      second = TCPSocket.new("127.0.0.1", port)
      second.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      Timeout.timeout(5) { sleep 0.01 until engine.starved? }
      2.times { gate << true }
      [first, second].each { |c| assert_equal 200, read_response(c)[0] }
      Timeout.timeout(5) { sleep 0.01 while engine.starved? }
      [first, second].each(&:close)
    end
  end

  # Connections opened one after another get the same descriptor number, and
  # each one goes through generations of its slot. A handle kept from the
  # first request must never reach a later client (with a narrow generation
  # it did, once the counter wrapped).
  def test_a_stale_request_handle_never_reaches_a_later_connection
    kept = nil
    outcomes = []
    app = lambda do |env|
      if kept.nil?
        kept = env["rack.early_hints"]
      else
        # rack.early_hints answers nil once its request's connection is gone
        outcomes << (kept.call({ "link" => "</stale.css>; rel=preload" }) ? :sent : :gone)
      end
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    with_server(app, min_threads: 1, max_threads: 1) do |_, port, _server|
      300.times do
        response = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        refute_includes response, "103 Early Hints", "a stale handle wrote into another client's response"
        assert_match(/ok\z/, response)
      end
    end
    assert_equal [:gone], outcomes.uniq
  end

  # A client that connected but sent nothing (a browser's speculative
  # preconnect) does not hold up a graceful stop until header_timeout.
  def test_stop_does_not_wait_for_a_silent_connection
    with_server(HELLO, header_timeout: 60) do |_, port, server, thread|
      silent = TCPSocket.new("127.0.0.1", port)
      Timeout.timeout(5) { sleep 0.01 until server.stats[:connections] == 1 }
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      server.stop
      assert thread.join(10), "the server waited for the silent connection"
      assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 5
      assert_equal "", read_all(silent, timeout: 2), "the silent connection is closed"
      silent.close
    end
  end

  # One that does send its request soon after the stop is still answered.
  def test_stop_still_answers_a_fresh_connection_that_sends_its_request
    with_server(HELLO) do |_, port, server, thread|
      sock = TCPSocket.new("127.0.0.1", port)
      Timeout.timeout(5) { sleep 0.01 until server.stats[:connections] == 1 }
      server.stop
      sleep 0.3
      sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      status, headers, body = read_response(sock)
      assert_equal [200, "close", "hello"], [status, headers["connection"], body]
      assert thread.join(10)
      sock.close
    end
  end
end
