# frozen_string_literal: true

require "test_helper"

# The Engine's cluster API (ext/margay/ruby/balance.c): keep-alive balancing
# moves idle connections between cluster workers: the engine detaches them
# (Engine#detach_idle, fds left open) and another engine adopts them
# (Engine#adopt). Both halves run here on one server's engine: which
# connections may leave, and that an adopted connection keeps the timeout its
# kind had (a new connection's header timeout, not the keep-alive timeout) and
# is served like any other.
class EngineClusterTest < Minitest::Test
  include Margay::TestHelper

  APP = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }

  def test_idle_connections_leave_with_their_kind_and_keep_their_timeouts_when_adopted
    with_server(APP, header_timeout: 2, keepalive_timeout: 30) do |host, port, server|
      kept = TCPSocket.new(host, port)
      kept.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
      assert_equal 200, read_response(kept)[0]
      fresh = TCPSocket.new(host, port) # sends nothing
      fresh_served = TCPSocket.new(host, port) # sends its first request once adopted
      busy = TCPSocket.new(host, port)
      busy.write("GET / HTTP/1.1\r\nHost: t\r\n") # half a head: buffered, so it stays
      eventually { server.stats[:connections] == 4 }
      sleep 0.1 # the half head has been read

      detached = server.engine.detach_idle(10, false)
      by_port = detached.to_h { |fd, kept_alive| [peer_port(fd), kept_alive] }
      assert_equal({ kept.local_address.ip_port => true, fresh.local_address.ip_port => false,
                     fresh_served.local_address.ip_port => false }, by_port,
                   "idle connections leave, each saying whether it served a request; a partial head stays")
      assert_equal 1, server.stats[:connections]
      detached.each { |fd, kept_alive| assert server.engine.adopt(fd, kept_alive) }
      assert_equal 4, server.stats[:connections]

      fresh_served.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
      assert_equal 200, read_response(fresh_served)[0], "an adopted new connection is served"
      busy.write("\r\n")
      assert_equal 200, read_response(busy)[0]
      assert closed_within?(fresh, 5), "the adopted new connection still has the 2 s header timeout"
      sleep 0.3 # well past what a header timeout would have allowed it
      kept.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
      assert_equal 200, read_response(kept)[0], "the adopted keep-alive connection has the 30 s keep-alive timeout"
    ensure
      [kept, fresh, fresh_served, busy].each { |s| s&.close }
    end
  end

  def test_pending_only_takes_the_connections_whose_request_waits_in_the_kernel
    with_one_busy_thread(2) do |server, (waiting, idle), _port, release|
      waiting.write(GET)
      sleep 0.05
      detached = server.engine.detach_idle(10, true)
      assert_equal [[waiting.local_address.ip_port, true]], detached.map { |fd, kept| [peer_port(fd), kept] }
      assert_equal [], server.engine.detach_idle(10, true), "the idle one stayed, and is still served"
      detached.each { |fd, kept_alive| server.engine.adopt(fd, kept_alive) }
      release.call
      assert_equal 200, read_response(waiting)[0], "the request that waited in the kernel is answered"
      idle.write(GET)
      assert_equal 200, read_response(idle)[0]
    end
  end

  def test_pending_only_looks_at_many_idle_connections_in_turns
    skip "needs /proc/self/fd" unless File.directory?("/proc/self/fd")
    with_one_busy_thread(100) do |server, idle, port, release|
      last = idle.max_by { |sock| server_fd(port, sock) } # the one the engine looks at last
      last.write(GET)
      sleep 0.05
      calls = Array.new(3) { server.engine.detach_idle(1, true) }
      assert_equal [], calls[0], "one call looks at 64 idle connections, not all 100"
      found = calls.flatten(1)
      assert_equal [last.local_address.ip_port], found.map { |fd, _| peer_port(fd) }, "found in a later turn"
      found.each { |fd, kept_alive| server.engine.adopt(fd, kept_alive) }
      release.call
      assert_equal 200, read_response(last)[0]
    end
  end

  private

  GET = "GET / HTTP/1.1\r\nHost: t\r\n\r\n"

  # A server with one thread, +count+ kept-alive idle connections, and its
  # only thread held by a slow request (nobody reads what clients send now).
  # Yields [server, connections, port, release]: release lets the slow
  # request finish.
  def with_one_busy_thread(count)
    gate = Queue.new
    app = lambda do |env|
      gate.pop if env["PATH_INFO"] == "/slow"
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    with_server(app, min_threads: 1, max_threads: 1) do |host, port, server|
      conns = Array.new(count) do
        sock = TCPSocket.new(host, port)
        sock.write(GET)
        assert_equal 200, read_response(sock)[0]
        sock
      end
      slow = TCPSocket.new(host, port)
      slow.write("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
      eventually { server.stats[:busy_threads] == 1 }
      release = lambda do
        gate << true
        assert_equal 200, read_response(slow)[0]
      end
      yield server, conns, port, release
    ensure
      gate << true
      [*conns, slow].each { |sock| sock&.close }
    end
  end

  def peer_port(fd)
    io = Socket.for_fd(fd)
    io.autoclose = false
    io.remote_address.ip_port
  end

  # The server's descriptor of client socket +sock+ (both ends live in this process).
  def server_fd(port, sock)
    client_port = sock.local_address.ip_port
    Dir.children("/proc/self/fd").map(&:to_i).find do |fd|
      io = Socket.for_fd(fd)
      io.autoclose = false
      io.local_address.ip_port == port && io.remote_address.ip_port == client_port
    rescue SystemCallError, SocketError, ArgumentError
      false
    end
  end

  def closed_within?(sock, seconds)
    sock.wait_readable(seconds) && sock.read_nonblock(1, exception: false).nil?
  rescue Errno::ECONNRESET
    true
  end

  def eventually(&condition)
    Timeout.timeout(5) { sleep 0.01 until condition.call }
  end
end
