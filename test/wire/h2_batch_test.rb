# frozen_string_literal: true

require "test_helper"
require "json"
require "open3"
require "margay/native"
require "support/h2_clients"

# HTTP/2 answers held for one write (ext/margay/core/h2_respond.c) and the bound on their wait
# (core/h2_flush.c), over real sockets, TLS and h2c: raw frames from test/support/h2_frames.py.
class H2BatchTest < Minitest::Test
  include Margay::TLSClient
  include Margay::H2Clients
  skip_on_jruby "no HTTP/2 in the pure-Ruby engine (http2=true binds are refused at start)"
  include Margay::TestHelper

  # How long after its answer a held one may reach the client here: the bound is 1 ms
  # (MG_H2_HOLD_NS); the rest is the machine's scheduling of a shared CI box and the client.
  SLACK = 0.2

  def setup
    skip_without_h2
    skip_without_python_h2
  end

  # Yields "tls:PORT" and "PORT" (h2_frames.py's way to name them) and the server.
  def with_h2_server(app, **settings)
    with_server(app, binds: h2_binds, **settings) do |_host, _port, server|
      tls, plain = server.addresses.map { |a| a[/:(\d+)\z/, 1] }
      yield "tls:#{tls}", plain, server
    end
  end

  def frames(port, *args) = h2_client(FRAMES, port, *args)

  def mono = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # The app: /slow takes 1.5 s; every answer's time (when the app handed it to the server) is
  # noted by path in +answered+.
  def noting_app(answered)
    lambda do |env|
      path = env["PATH_INFO"]
      sleep 1.5 if path == "/slow"
      env["rack.response_finished"] << ->(*) { answered[path] = mono }
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
  end

  # The only thread answers /a while /slow and /c wait in the queue (its answer is held for
  # them), then takes /slow: /a must not wait for /slow's 1.5 s. Without the bound it does
  # (written when the thread takes /c, after /slow).
  def test_an_answer_held_while_its_thread_runs_a_slow_stream_reaches_the_client_within_the_bound
    answered = {}
    with_h2_server(noting_app(answered), min_threads: 1, max_threads: 1) do |tls, plain|
      [tls, plain].each do |port|
        answered.clear
        ended = frames(port, "ended", "/a", "/slow", "/c")
        assert_operator ended["/slow"] - ended["sent"], :>=, 1.5, port
        assert answered["/a"], "#{port}: /a answered"
        assert_operator ended["/a"] - answered["/a"], :<, SLACK, "#{port}: /a held past the bound"
        assert_operator ended["/a"] - ended["sent"], :<, 1.0, port
        assert_operator ended["/c"], :>=, ended["/slow"], "#{port}: /c ran after /slow"
      end
    end
  end

  # Many fast streams on one connection, one thread and two: every answer arrives, whole.
  def test_a_hundred_streams_answered_in_batches_all_arrive
    app = ->(env) { [200, { "content-type" => "text/plain" }, ["ok #{env['PATH_INFO']}"]] }
    [1, 2].each do |threads|
      with_h2_server(app, min_threads: threads, max_threads: threads) do |tls, plain|
        [tls, plain].each do |port|
          paths = (1..100).map { |i| "/s#{i}" }
          got = frames(port, "frames", *paths)
          assert_equal paths.sort, got.keys.sort, port
          got.each do |path, events|
            assert_equal "200", events.first["response"].to_h[":status"], "#{port} #{path}"
            assert_equal %w[data end], events.last(2), "#{port} #{path}"
          end
        end
      end
    end
  end

  # A client that leaves while the only thread runs its slow stream, its answers held or written
  # by the flusher and one stream still queued: the stale stream is dropped, the server serves on.
  def test_a_client_that_leaves_during_its_slow_stream_leaves_nothing_behind
    answered = {}
    with_h2_server(noting_app(answered), min_threads: 1, max_threads: 1) do |_tls, plain|
      pid = Process.spawn(CLIENT, PYTHON, FRAMES, plain, "ended", "/a", "/slow", "/c", out: File::NULL, err: File::NULL)
      sleep 0.3
      Process.kill(:KILL, pid)
      Process.wait(pid)
      ended = frames(plain, "ended", "/again")
      assert ended["/again"], "served after the first client left"
    end
  end
end
