# frozen_string_literal: true

require "test_helper"
require "digest"
require "json"
require "open3"
require "timeout"
require "margay/native"
require "support/h2_clients"

# HTTP/2 answers held for one write (ext/margay/core/h2_respond.c, core/h2_flush.c) at the edges:
# a graceful stop, a drain or max_keepalive_requests' GOAWAY, a client that does not read, clients
# that leave or reset streams while answers are held. Over TLS and h2c; the clients read the
# frames raw (test/support/h2_raw.py): python3-h2 drops those that come after a GOAWAY.
class H2HoldTest < Minitest::Test
  include Margay::TLSClient
  include Margay::H2Clients
  skip_on_jruby "no HTTP/2 in the pure-Ruby engine (http2=true binds are refused at start)"
  include Margay::TestHelper

  BIG = 4 * 1024 * 1024 # a body several of which fill the socket buffers of both ends on loopback
  MID = 64 * 1024 # under the connection's cap (response_buffer_limit): the app never waits for the client
  ANSWERED = %w[head data end].freeze

  def setup
    skip_without_h2
    skip_without_python_h2
  end

  # Yields "tls:PORT" or "PORT" (the clients' way to name them) and the server, one server each.
  def each_h2_server(app, **settings)
    %w[tls plain].zip(h2_binds).each do |kind, bind|
      with_server(app, binds: [bind], **settings) do |_host, port, server, thread|
        yield kind == "tls" ? "tls:#{port}" : port.to_s, server, thread
      end
    end
  end

  def raw(port, *args) = h2_client(RAW, port, *args)

  # In a thread: the client's JSON once it is done.
  def raw_later(port, *args) = Thread.new { raw(port, *args) }

  # The app: /slow says it began (+began+) and takes +slow+ s; /big* is BIG bytes; the rest "ok".
  def app(began = Queue.new, slow: 0.5)
    lambda do |env|
      path = env["PATH_INFO"]
      if path == "/slow"
        began << true
        sleep slow
      end
      body = path.start_with?("/big") ? "b" * BIG : (path == "/mid" ? "m" * MID : "ok")
      [200, { "content-type" => "text/plain" }, [body]]
    end
  end

  PATHS = %w[/a /slow /c /d /e].freeze

  def assert_all_answered_then_goaway(got, where, last_id: 2 * PATHS.size - 1)
    PATHS.each { |p| assert_equal ANSWERED, got["streams"][p], "#{where}: #{p}" }
    assert_equal [last_id, 0], got["goaway"], "#{where}: GOAWAY NO_ERROR naming the last stream"
    assert got["closed"], "#{where}: closed after the answers"
  end

  # The only thread answers /a (held for the queued ones, then written by the flusher), then runs
  # /slow while the stop comes; /slow's, /c's, /d's and /e's answers (held in turn for those
  # queued behind them) come after the GOAWAY; then the connection closes and the server stops.
  def test_a_graceful_stop_answers_every_stream_in_flight_after_its_goaway_then_closes
    began = Queue.new
    each_h2_server(app(began), min_threads: 1, max_threads: 1) do |port, server, thread|
      client = raw_later(port, "goaway", *PATHS)
      assert Timeout.timeout(5) { began.pop }, "#{port}: /slow began"
      server.stop
      got = client.value
      assert_all_answered_then_goaway(got, port)
      assert_equal %w[/slow /c /d /e], got["after_goaway"] - ["/a"], port # /a's may be late too
      assert thread.join(5), "#{port}: the server stopped"
    end
  end

  # max_keepalive_requests: the GOAWAY once that many streams came; those already sent are all
  # answered (held while the others wait), then the connection closes.
  def test_max_keepalive_requests_goaway_with_answers_held
    each_h2_server(app(slow: 0.2), min_threads: 1, max_threads: 1, max_keepalive_requests: 2) do |port|
      assert_all_answered_then_goaway(raw(port, "goaway", *PATHS), port)
    end
  end

  # A drain while the only thread runs /slow: every stream is answered, then GOAWAY and close.
  def test_a_drain_answers_every_stream_in_flight_then_goaway_and_close
    began = Queue.new
    each_h2_server(app(began), min_threads: 1, max_threads: 1) do |port, server|
      client = raw_later(port, "goaway", *PATHS)
      assert Timeout.timeout(5) { began.pop }, "#{port}: /slow began"
      server.drain(30)
      assert_all_answered_then_goaway(client.value, port)
    end
  end

  BIGS = %w[/big1 /slow /big2 /big3].freeze

  # /big1's answer is held while /slow runs; the flusher writes it into a socket the client does
  # not read for 0.5 s: what the socket does not take is kicked to the loop, which writes it once
  # the client reads. Every body arrives whole.
  def test_a_client_that_reads_late_gets_every_body_the_flusher_began
    each_h2_server(app(slow: 0.3), min_threads: 1, max_threads: 1) do |port|
      got = raw(port, "stall", 0.5, *BIGS)
      assert_equal BIGS.sort, got["ended"].sort, port
      assert_equal [BIG, 2, BIG, BIG], BIGS.map { |p| got["body"][p] }, port
    end
  end

  # The same client reading only after 3 s, with write_timeout 1: the server closes it (not all
  # bodies came) and serves the next one.
  def test_write_timeout_closes_a_client_that_never_reads_while_answers_are_held
    each_h2_server(app(slow: 0.3), min_threads: 1, max_threads: 1, write_timeout: 1) do |port|
      got = raw(port, "stall", 3, *BIGS)
      assert got["closed"], "#{port}: closed: #{got}"
      assert_operator got["ended"].size, :<, BIGS.size, port
      assert_equal ANSWERED, raw(port, "churn", 0, "/after")["streams"]["/after"], port
    end
  end

  # Windows of zero: the heads go out (held while the others wait), no body; once the client
  # opens its windows every body arrives whole.
  def test_zero_windows_then_a_grant_with_answers_held
    each_h2_server(app, min_threads: 1, max_threads: 1) do |port|
      Open3.popen3(CLIENT, PYTHON, FRAMES, port, "zero_window", "5", "/mid", "grant") do |stdin, stdout, stderr, wait|
        assert_equal "ready", stdout.gets&.chomp, "#{port}: #{stderr.read unless wait.alive?}"
        stdin.puts "go"
        line = stdout.gets
        assert wait.value.success?, "#{port}: #{stderr.read}"
        got = JSON.parse(line)
        assert_equal 5, got["heads"], port
        assert_equal 5, got["ended"], port
        assert_equal [MID], got["bodies"].map(&:first).uniq, port
        assert_equal 1, got["bodies"].map(&:last).uniq.size, port
      end
    end
  end

  # Windows of zero and two bodies of the connection's cap (BIG: in memory, not spilled): the
  # second waits in the app, on the only thread, for the client to take the first. The client
  # opens its windows once both heads came: the waiting thread reads that itself (no other is in
  # the loop), and both bodies arrive whole, long before write_timeout.
  def test_the_only_thread_waiting_for_a_client_s_window_reads_its_grant
    each_h2_server(app, min_threads: 1, max_threads: 1, write_timeout: 10) do |port|
      Open3.popen3(CLIENT, PYTHON, FRAMES, port, "zero_window", "2", "/big", "grant") do |stdin, stdout, stderr, wait|
        assert_equal "ready", stdout.gets&.chomp, "#{port}: #{stderr.read unless wait.alive?}"
        granted = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        stdin.puts "go"
        line = stdout.gets
        took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - granted
        assert wait.value.success?, "#{port}: #{stderr.read}"
        got = JSON.parse(line)
        assert_equal 2, got["ended"], "#{port}: both bodies whole after #{took.round(2)} s: #{got}"
        assert_equal [BIG], got["bodies"].map(&:first).uniq, port
        assert_operator took, :<, 5, port
      end
    end
  end

  # The same for a streamed body's flush (Engine#flush waits until the client took every byte).
  def test_the_only_thread_in_a_flush_reads_the_client_s_grant
    streamed = lambda do |_env|
      [200, { "content-type" => "text/plain" }, lambda { |stream|
        stream.write("s" * MID)
        stream.flush
        stream.write("e")
        stream.close
      }]
    end
    each_h2_server(streamed, min_threads: 1, max_threads: 1, write_timeout: 10) do |port|
      Open3.popen3(CLIENT, PYTHON, FRAMES, port, "zero_window", "1", "/s", "grant") do |stdin, stdout, stderr, wait|
        assert_equal "ready", stdout.gets&.chomp, "#{port}: #{stderr.read unless wait.alive?}"
        stdin.puts "go"
        line = stdout.gets
        assert wait.value.success?, "#{port}: #{stderr.read}"
        assert_equal 1, JSON.parse(line)["ended"], port
        assert_equal [[MID + 1, Digest::SHA256.hexdigest("#{'s' * MID}e")]], JSON.parse(line)["bodies"], port
      end
    end
  end

  # The same wait for a client that opens its windows a byte at a time, PINGing: what the waiting
  # thread reads is no progress (under 16 KiB in write_timeout), so the stream is reset after
  # write_timeout, the thread is free again and the connection closes; the next client is served.
  def test_the_only_thread_waiting_for_a_window_dribbler_is_freed_after_write_timeout
    each_h2_server(app, min_threads: 1, max_threads: 1, write_timeout: 1) do |port|
      got = h2_client(FRAMES, port, "zero_window", 2, "/big", "dribble")
      assert got["closed"], "#{port}: #{got}"
      assert_operator got["seconds"], :<, 6, "#{port}: write_timeout (1 s) frees the thread: #{got}"
      assert_equal ANSWERED, raw(port, "churn", 0, "/after")["streams"]["/after"], port
    end
  end

  # Clients that reset streams whose answers are held, reset the TCP connection or close it
  # right after their requests, 30 in a row (each new one likely on the fd of the one before):
  # the next connection gets its answers and nothing meant for another.
  def test_clients_that_leave_while_answers_are_held_leave_nothing_for_the_next
    paths = %w[/f1 /s2 /f3 /f4 /s5 /f6 /f7 /f8]
    app = lambda do |env|
      sleep 0.005 if env["PATH_INFO"].start_with?("/s")
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    [1, 2].each do |threads|
      each_h2_server(app, min_threads: threads, max_threads: threads) do |port|
        got = raw(port, "churn", 30, *paths)
        paths.each { |p| assert_equal ANSWERED, got["streams"][p], "#{port} #{threads}: #{p}" }
        assert_empty got["stray"], "#{port} #{threads}"
      end
    end
  end
end
