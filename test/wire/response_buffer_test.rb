# frozen_string_literal: true

require "test_helper"
require "socket"

# A response that fits the thread's buffer is written from it at once (what the socket does not
# take is copied into the connection's queue); a larger one is built in its own buffer and queued.
# Many pipelined responses, read late by a client with a small receive buffer, arrive whole and
# in order, and so does a response larger than the thread's buffer.
class ResponseBufferTest < Minitest::Test
  include Margay::TestHelper

  COUNT = 999

  # A 7,000-byte body made of the path, so that a byte out of place shows.
  PATH_BODY = lambda do |env|
    path = env["PATH_INFO"]
    body = (path * ((7000 / path.bytesize) + 1)).byteslice(0, 7000)
    [200, { "content-type" => "text/plain", "content-length" => "7000" }, [body]]
  end

  def test_pipelined_responses_past_a_full_socket_arrive_whole_and_in_order
    with_server(PATH_BODY) do |_, port|
      sock = Socket.new(:INET, :STREAM)
      sock.setsockopt(Socket::SOL_SOCKET, Socket::SO_RCVBUF, 4096)
      sock.connect(Socket.sockaddr_in(port, "127.0.0.1"))
      sock.write((1..COUNT).map { |i| "GET /r#{i}/ HTTP/1.1\r\nHost: x\r\n\r\n" }.join)
      sleep 0.3 # the server answers ahead of the reader
      COUNT.times do |i|
        status, _, body = read_response(sock)
        path = "/r#{i + 1}/"
        assert_equal [200, (path * ((7000 / path.bytesize) + 1)).byteslice(0, 7000)], [status, body], "response #{i + 1}"
      end
    ensure
      sock&.close
    end
  end

  def test_a_response_larger_than_the_thread_buffer_is_sent_whole
    big = "x" * 20_000
    with_server(->(_) { [200, { "content-type" => "text/plain" }, [big]] }) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      2.times do
        sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal [200, big], read_response(sock).values_at(0, 2)
      end
    ensure
      sock&.close
    end
  end
end
