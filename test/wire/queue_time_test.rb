# frozen_string_literal: true

require "test_helper"
require "margay/metrics"

# Queue time measured by the server, over real sockets: margay.queue_time of a
# request that waited behind a slow one for the only thread, Puma's
# puma.request_body_wait, the X-Request-Start field queue_time_header adds,
# shedding past queue_timeout, and the stats' histograms.
class WireQueueTimeTest < Minitest::Test
  include Margay::TestHelper

  # Each call is reported on @calls: [path, the env's figures, wall time of the call].
  def app
    calls = @calls = Queue.new
    lambda do |env|
      called_at = Time.now.to_f
      calls << [env["PATH_INFO"], env.slice("margay.queue_time", "puma.request_body_wait", "HTTP_X_REQUEST_START"),
                called_at]
      sleep 0.5 if env["PATH_INFO"] == "/slow"
      spin_until = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1 if env["PATH_INFO"] == "/spin"
      nil while spin_until && Process.clock_gettime(Process::CLOCK_MONOTONIC) < spin_until # holds a fiber's thread
      env["rack.input"].read
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
  end

  def with_one_thread(**settings, &block)
    with_server(app, min_threads: 1, max_threads: 1, **settings) do |_host, port, server|
      # the kernel turns receive timestamps on shortly after the listener asks (deferred work):
      # one request first, so that those measured below are stamped
      assert_match(%r{\AHTTP/1.1 200}, raw_get(port, "/warm"))
      pop_within(@calls)
      block.call(port, server)
    end
  end

  # A new connection with a GET of +path+ written on it (+fields+: more header lines); a block
  # is called just before the write.
  def send_get(port, path, fields = "")
    sock = TCPSocket.new("127.0.0.1", port)
    yield if block_given?
    sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\n#{fields}\r\n")
    sock
  end

  # Start +path+ (/slow: a sleep; /spin: a computation) on the only thread and return its
  # socket once the app runs it.
  def occupy(port, path = "/slow")
    slow = send_get(port, path)
    assert_equal path, pop_within(@calls)[0]
    slow
  end

  def test_queue_time_of_a_request_queued_behind_a_slow_one
    skip_on_jruby "5 ms of the truth needs the kernel's receive stamp (SO_TIMESTAMPNS); the pure engine stamps its read of the request"
    with_one_thread do |port, _server|
      slow = occupy(port)
      sent_at = nil
      queued = send_get(port, "/queued") { sent_at = Time.now.to_f }
      path, figures, called_at = pop_within(@calls)
      assert_equal "/queued", path
      truth = called_at - sent_at
      assert_operator truth, :>, 0.3, "it waited for the slow request"
      assert_kind_of Float, figures["margay.queue_time"]
      assert_in_delta truth, figures["margay.queue_time"], 0.005, "arrival to the app call"
      assert_equal 0.0, figures["puma.request_body_wait"], "no body: nothing waited for"
      assert_nil figures["HTTP_X_REQUEST_START"], "queue_time_header is off by default"
      [slow, queued].each { |s| assert_equal 200, read_response(s)[0] }
    ensure
      [slow, queued].each { |s| s&.close }
    end
  end

  def test_request_body_wait_in_milliseconds_as_puma
    with_one_thread do |port, _server|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
      sleep 0.2
      sock.write("cd")
      _path, figures, = pop_within(@calls)
      wait = figures["puma.request_body_wait"]
      assert_kind_of Float, wait
      assert_operator wait, :>=, 150, "the 200 ms between the head and the end of the body, in ms"
      assert_operator wait, :<, 1000
      assert_operator figures["margay.queue_time"], :>=, wait / 1000.0, "the queue time counts from the first byte"
      assert_equal 200, read_response(sock)[0]
    ensure
      sock&.close
    end
  end

  def test_queue_time_header_in_nginx_msec_format
    with_one_thread(queue_time_header: true) do |port, _server|
      sent_at = Time.now.to_f
      assert_match(%r{\AHTTP/1.1 200}, raw_get(port, "/stamped"))
      _path, figures, = pop_within(@calls)
      value = figures["HTTP_X_REQUEST_START"]
      assert_match(/\At=\d{10}\.\d{3}\z/, value)
      assert_in_delta sent_at, Float(value.delete_prefix("t=")), 0.05
      raw_exchange(port, "GET /given HTTP/1.1\r\nHost: x\r\nX-Request-Start: t=1700000000.123\r\nConnection: close\r\n\r\n")
      _path, figures, = pop_within(@calls)
      assert_equal "t=1700000000.123", figures["HTTP_X_REQUEST_START"], "a proxy's own stamp is kept"
    end
  end

  def test_a_request_waiting_past_queue_timeout_is_shed
    with_one_thread(queue_timeout: 0.2) do |port, server|
      slow = occupy(port)
      queued = send_get(port, "/queued")
      status, headers, body = read_response(queued)
      assert_equal 503, status
      assert_equal "1", headers["retry-after"]
      assert_equal "close", headers["connection"]
      assert_equal "Service Unavailable\n", body
      assert_equal 200, read_response(slow)[0]
      assert_match(%r{\AHTTP/1.1 200}, raw_get(port, "/after"), "a request that did not wait is served")
      assert_equal %w[/after], [pop_within(@calls)[0]], "the shed request never reached the app"
      stats = server.stats
      assert_equal 1, stats[:shed]
      assert_equal 3, stats[:requests], "/warm, /slow and /after: the shed one never ran"
      assert_equal 1, Margay::Stats.own_counters(stats)[:shed]
    ensure
      [slow, queued].each { |s| s&.close }
    end
  end

  def test_histograms_in_the_stats
    with_one_thread do |port, server|
      slow = occupy(port)
      queued = send_get(port, "/queued", "Connection: close\r\n")
      [slow, queued].each { |s| assert_equal 200, read_response(s)[0] }
      pop_within(@calls)
      stats = server.stats
      queue = stats[:queue_time_seconds]
      assert_equal 3, queue[:count]
      assert_equal 2, queue[:buckets][0.25], "/warm and /slow waited for nothing"
      assert_equal 3, queue[:buckets][0.75], "/queued waited about 0.5 s"
      assert_equal 3, queue[:buckets][Float::INFINITY]
      assert_operator queue[:sum], :>, 0.3
      duration = stats[:request_duration_seconds]
      assert_equal 3, duration[:count], "each response handed back"
      assert_equal 2, duration[:buckets][0.25]
      assert_equal 2, duration[:buckets][0.5], "/slow took 0.5 s"
      assert_equal 3, duration[:buckets][0.75]
      assert_equal [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, Float::INFINITY],
                   duration[:buckets].keys
      assert_equal Margay::Stats::HISTOGRAM_BOUNDS, queue[:buckets].keys, "what a cluster worker's status frame carries"
      assert_equal duration[:buckets].values.sort, duration[:buckets].values, "cumulative"
      text = Margay::Metrics.snapshot(server)
      assert_match(/^margay_queue_time_seconds_bucket\{index="0",le="0.75"\} 3$/, text)
      assert_match(/^http_server_request_duration_seconds_count\{index="0"\} 3$/, text)
    ensure
      [slow, queued].each { |s| s&.close }
    end
  end

  def test_backlog_counts_the_requests_waiting_for_a_thread
    skip_on_jruby "the pure engine's reactor accepts at once, so no client waits in the listen queue"
    with_one_thread do |port, server|
      kept = Array.new(3) { TCPSocket.new("127.0.0.1", port) }
      kept.each do |sock| # accepted and kept alive while the thread is free
        sock.write("GET /warm HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal 200, read_response(sock)[0]
        pop_within(@calls)
      end
      assert_equal 0, server.stats[:backlog], "nothing waits"
      slow = occupy(port)
      kept.each do |sock|
        sock.write("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_acked(sock)
      end
      assert_equal 3, server.stats[:backlog], "three requests on kept-alive connections, no thread free"
      assert_equal 3, Margay::Stats.single(server.stats, 1)[:backlog], "Puma's backlog stat"
      fresh = send_get(port, "/fresh")
      wait_acked(fresh)
      assert_equal 3, server.stats[:backlog], "a client not accepted yet is the listen queue's, not the backlog's"
      assert_equal 1, Margay::Metrics.listen_queue(server.listeners)
      ([slow, fresh] + kept).each { |s| assert_equal 200, read_response(s)[0] }
      assert_equal 0, server.stats[:backlog]
    ensure
      ([slow, fresh] + kept.to_a).each { |s| s&.close }
    end
  end

  # Fiber mode takes requests through its own wait (core/waits.c): the same admission. A
  # request waiting behind a fiber that computes for a second is shed past queue_timeout 0.3
  # (this process's client threads wait for the GVL meanwhile, so no finer truth is taken here).
  def test_fiber_mode_measures_and_sheds_alike
    skip_on_jruby "no fiber mode: it needs the C engine's epoll"
    with_one_thread(fiber_scheduler: true, event_backend: :auto, queue_timeout: 0.3) do |port, server|
      spin = occupy(port, "/spin")
      shed = send_get(port, "/shed")
      assert_equal 503, read_response(shed)[0]
      assert_equal 200, read_response(spin)[0]
      assert_match(%r{\AHTTP/1.1 200}, raw_get(port, "/after"))
      path, figures, = pop_within(@calls)
      assert_equal "/after", path, "the shed request never reached the app"
      assert_operator figures["margay.queue_time"], :<, 0.1
      assert_equal 1, server.stats[:shed]
    ensure
      [spin, shed].each { |s| s&.close }
    end
  end
end
