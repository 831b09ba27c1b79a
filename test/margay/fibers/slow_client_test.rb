# frozen_string_literal: true

require "test_helper"

# Fiber mode: a streaming body that waits for a slow client (stream.flush with the client's
# window full) waits in its own fiber, through the scheduler, never in the thread: the other
# requests on that thread go on meanwhile. One pool thread (-t 1:1); no wall-time bars, only
# "answered while the slow one still waits" and every byte delivered in the end. And in both
# modes a flush waits for the bytes spilled past response_buffer_limit too.
class FiberSlowClientTest < Minitest::Test
  skip_on_jruby "no fiber mode: it needs the C engine's epoll"
  include Margay::TestHelper

  # Far more than the server's send buffer can grow to (net.ipv4.tcp_wmem's maximum) and the
  # client's 4 KiB window take: the flush must wait for the client.
  WMEM = "/proc/sys/net/ipv4/tcp_wmem"
  WMEM_MAX = File.exist?(WMEM) ? File.read(WMEM).split.last.to_i : 4 * 1024 * 1024
  BIG = [16 * 1024 * 1024, 4 * WMEM_MAX].max

  def setup
    @flushing = Queue.new
    @flushed = Queue.new
    @app = lambda do |env|
      next [200, { "content-type" => "text/plain" }, ["quick"]] if env["PATH_INFO"] == "/quick"

      body = lambda do |stream|
        stream.write("x" * BIG)
        @flushing << true
        stream.flush # the client reads nothing yet: this waits for it
        @flushed << true
        stream.write("end")
      rescue Margay::ClientGone => e
        @gone = e
        raise
      ensure
        stream.close
      end
      [200, { "content-type" => "application/octet-stream", "content-length" => (BIG + 3).to_s }, body]
    end
  end

  # A client whose receive window is small and which reads nothing until told.
  def slow_client(port)
    sock = Socket.new(:INET, :STREAM)
    sock.setsockopt(Socket::SOL_SOCKET, Socket::SO_RCVBUF, 4096)
    sock.connect(Socket.sockaddr_in(port, "127.0.0.1"))
    sock.write("GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    sock
  end

  # One fiber-mode thread; yields the port once the slow client's flush has begun.
  def while_flushing(write_timeout:)
    with_server(@app, fiber_scheduler: true, event_backend: :auto, min_threads: 1, max_threads: 1,
                      write_timeout: write_timeout) do |_host, port|
      slow = slow_client(port)
      pop_within(@flushing)
      yield port, slow
    ensure
      slow&.close
    end
  end

  # GET /quick on a connection of its own: [status, body].
  def quick_answer(port)
    quick = TCPSocket.new("127.0.0.1", port)
    quick.write("GET /quick HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    read_response(quick, timeout: 10).values_at(0, 2)
  ensure
    quick&.close
  end

  def test_a_flush_to_a_slow_client_does_not_hold_the_thread
    while_flushing(write_timeout: 30) do |port, slow|
      assert_equal [200, "quick"], quick_answer(port),
                   "the only thread answered another request while the slow client's flush waited"
      assert @flushed.empty?, "the slow client has read nothing yet: its flush still waits"

      data = read_all(slow, timeout: 10)
      assert pop_within(@flushed, 10)
      assert data.end_with?("x" * 100 + "end"), "every byte delivered once the client reads"
      assert_equal BIG + 3, data.bytesize - data.index("\r\n\r\n") - 4
    end
  end

  def test_a_client_that_never_reads_is_dropped_at_write_timeout_and_the_thread_serves_on
    while_flushing(write_timeout: 1) do |port, _slow|
      deadline = Margay::Clock.now + 10
      sleep 0.05 until @gone || Margay::Clock.now > deadline
      assert_match(/write timeout/, @gone&.message.to_s, "the waiting fiber gave up on the client")
      assert @flushed.empty?
      assert_equal [200, "quick"], quick_answer(port)
    end
  end

  # Thread mode, the same flush: past response_buffer_limit the body sits in the spill tempfile,
  # and stream.flush returns only once the client has taken it all (it returned as soon as the
  # memory part was written).
  def test_in_thread_mode_a_flush_waits_for_the_spilled_bytes_too
    with_server(@app, min_threads: 1, max_threads: 1, write_timeout: 30) do |_host, port|
      slow = slow_client(port)
      pop_within(@flushing)
      sleep 0.3 # the flush would have returned by now
      assert @flushed.empty?, "the client has read nothing: the flush still waits"
      data = read_all(slow, timeout: 10)
      assert pop_within(@flushed, 10)
      assert_equal BIG + 3, data.bytesize - data.index("\r\n\r\n") - 4
    ensure
      slow&.close
    end
  end
end
