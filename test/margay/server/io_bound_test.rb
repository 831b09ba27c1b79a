# frozen_string_literal: true

require "test_helper"

# Puma 8's max_io_threads and env["puma.mark_as_io_bound"] in thread mode (Server::IoBound): a
# request that marks itself I/O-bound lets the pool start a thread beyond max_threads, so
# that an app written for Puma's I/O threads serves others while it waits.
class IoBoundTest < Minitest::Test
  include Margay::TestHelper

  def request(port, path)
    sock = TCPSocket.new("127.0.0.1", port)
    sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    sock
  end

  def app(release, marked)
    lambda do |env|
      if env["PATH_INFO"] == "/io"
        env["puma.mark_as_io_bound"].call
        marked << true
        release.pop
      end
      [200, { "content-type" => "text/plain" }, [Thread.current.name]]
    end
  end

  def test_a_marked_request_lets_the_pool_grow_past_max_threads
    release = Queue.new
    marked = Queue.new
    with_server(app(release, marked), min_threads: 1, max_threads: 1, max_io_threads: 1) do |_host, port, server|
      io = request(port, "/io")
      pop_within(marked)
      other = request(port, "/other") # served by the extra thread while /io still waits
      status, _, body = read_response(other, timeout: 10)
      assert_equal 200, status
      assert_equal "margay-1", body
      assert_equal 2, server.stats[:threads]
      release << true
      assert_equal [200, "margay-0"], read_response(io).values_at(0, 2)
    ensure
      release << true
      io&.close
      other&.close
    end
  end

  def test_without_max_io_threads_the_mark_is_a_no_op
    release = Queue.new
    marked = Queue.new
    with_server(app(release, marked), min_threads: 1, max_threads: 1) do |_host, port, server|
      io = request(port, "/io")
      pop_within(marked)
      sleep 0.1 # some supervisor looks: it must not grow
      assert_equal 1, server.stats[:threads]
      release << true
      assert_equal 200, read_response(io).first
    ensure
      io&.close
    end
  end
end
