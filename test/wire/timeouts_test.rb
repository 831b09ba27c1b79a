# frozen_string_literal: true

require "test_helper"

# Connection lifetime limits enforced by the native side: idle keep-alive,
# body read timeout, requests per connection.
class TimeoutsTest < Minitest::Test
  include Margay::TestHelper

  def test_idle_keep_alive_connection_is_closed
    with_server(HELLO, keepalive_timeout: 0.4) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal 200, read_response(sock)[0]
      started = Margay::Clock.now
      assert_equal "", read_all(sock, timeout: 5), "an idle connection gets no bytes, just a close"
      assert_operator Margay::Clock.now - started, :<, 3
    ensure
      sock&.close
    end
  end

  def test_stalled_body_gets_408
    with_server(HELLO, body_timeout: 0.4) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
      assert_match(%r{\AHTTP/1.1 408 }, read_all(sock, timeout: 5))
    ensure
      sock&.close
    end
  end

  def test_requests_per_connection_are_bounded
    with_server(HELLO, max_keepalive_requests: 3) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      headers = Array.new(3) do
        sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        read_response(sock)[1]
      end
      assert_nil headers[1]["connection"]
      assert_equal "close", headers[2]["connection"]
      assert_equal "", read_all(sock, timeout: 3)
    ensure
      sock&.close
    end
  end
end

# At max_connections, idle keep-alive connections make room for new clients.
class ConnectionLimitTest < Minitest::Test
  include Margay::TestHelper

  def test_idle_keep_alive_connections_are_reclaimed_at_the_limit
    with_server(HELLO, max_connections: 5) do |_, port, server|
      idle = Array.new(5) do
        TCPSocket.new("127.0.0.1", port).tap do |s|
          s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
          read_response(s)
        end
      end
      assert_equal 5, server.stats[:connections]
      sleep 1.1 # they have been idle for a second
      raw = raw_exchange(port, "GET /new HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout: 5)
      assert_match(/hello\z/, raw, "a new client is served once idle connections are reclaimed")
      closed = idle.count { |s| s.wait_readable(2) && s.read_nonblock(1, exception: false).nil? }
      assert_operator closed, :>=, 1, "an idle keep-alive connection was closed to make room"
      idle.each(&:close)
    end
  end

  def test_silent_connections_are_reclaimed_at_the_limit
    with_server(HELLO, max_connections: 5) do |_, port, server|
      silent = Array.new(5) { TCPSocket.new("127.0.0.1", port) } # a flood: connect, send nothing
      Timeout.timeout(5) { sleep 0.05 until server.stats[:connections] == 5 }
      raw = raw_exchange(port, "GET /new HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout: 6)
      assert_match(/hello\z/, raw, "served once connections silent for 2 s make room")
      silent.each(&:close)
    end
  end
end
