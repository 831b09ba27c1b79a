# frozen_string_literal: true

require_relative "../test_helper"

module Margay
  # One connection pipelining slow requests cannot keep a thread while other clients wait
  # (issue 12 §1): once its turn is over, its next buffered request goes behind the other
  # ready connections and the pending accepts. With one thread the order in which the app sees
  # the requests is the server's queue order, so these tests assert that order (no timing).
  class FairnessTest < Minitest::Test
    include TestHelper

    HOG_REQUESTS = 6

    # The app records every path in +order+; /hog/1 waits for the test (the other clients'
    # requests are sent meanwhile), and each of the hog's requests outlasts its turn on the
    # thread; the rest answer at once.
    def recording_app(order, started, gate)
      lambda do |env|
        path = env["PATH_INFO"]
        order << path
        if path.start_with?("/hog/")
          if path == "/hog/1"
            started << true
            gate.pop
          end
          sleep 0.02 # longer than a turn (MG_TURN_MS): the hog's next request waits its turn
        end
        [200, { "content-type" => "text/plain" }, [path]]
      end
    end

    # Wait until the server's kernel has acknowledged everything written on +sock+ (so the
    # server's event loop has seen those bytes arrive): TCP_INFO's tcpi_unacked is 0.
    def wait_acked(sock)
      deadline = Clock.now + 5
      loop do
        info = sock.getsockopt(Socket::IPPROTO_TCP, Socket::TCP_INFO).data
        return if info.unpack("C8L5").last.zero?
        flunk "the server never acknowledged the request" if Clock.now > deadline

        sleep 0.005
      end
    end

    def pipeline(count)
      (1..count).map { |i| "GET /hog/#{i} HTTP/1.1\r\nHost: x\r\n\r\n" }.join
    end

    # Start the hog's pipeline, wait until its first request is in the app, let +others+ send
    # their requests (it returns their sockets), release the hog once they arrived, and return the order in which the app saw every request.
    def served_order(port, order, started, gate, others)
      hog = TCPSocket.new("127.0.0.1", port)
      hog.write(pipeline(HOG_REQUESTS))
      pop_within(started)
      others.call.each { |sock| wait_acked(sock) } # in the server's kernel before the hog's first response
      gate << true
      yield
      HOG_REQUESTS.times do |i|
        status, _, body = read_response(hog)
        assert_equal [200, "/hog/#{i + 1}"], [status, body], "the hog's responses come in order"
      end
      Array.new(HOG_REQUESTS + 1) { pop_within(order) }
    ensure
      hog&.close
    end

    def test_a_ready_keepalive_connection_goes_before_the_hogs_next_pipelined_request
      order = Queue.new
      started = Queue.new
      gate = Queue.new
      with_server(recording_app(order, started, gate), min_threads: 1, max_threads: 1) do |_host, port|
        other = TCPSocket.new("127.0.0.1", port)
        other.write("GET /warm HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal 200, read_response(other).first
        assert_equal "/warm", pop_within(order)

        served = served_order(port, order, started, gate, -> { other.write("GET /other HTTP/1.1\r\nHost: x\r\n\r\n") && [other] }) do
          assert_equal [200, "/other"], read_response(other).values_at(0, 2)
        end
        assert_equal %w[/hog/1 /other], served.first(2), "served in arrival order: #{served.inspect}"
        assert_equal (1..HOG_REQUESTS).map { |i| "/hog/#{i}" }, served - ["/other"]
      ensure
        other&.close
      end
    end

    def test_a_new_connection_is_served_before_the_hogs_third_pipelined_request
      order = Queue.new
      started = Queue.new
      gate = Queue.new
      fresh = nil
      with_server(recording_app(order, started, gate), min_threads: 1, max_threads: 1) do |_host, port|
        send_fresh = lambda do
          fresh = TCPSocket.new("127.0.0.1", port)
          fresh.write("GET /fresh HTTP/1.1\r\nHost: x\r\n\r\n")
          [fresh]
        end
        served = served_order(port, order, started, gate, send_fresh) do
          assert_equal [200, "/fresh"], read_response(fresh).values_at(0, 2)
        end
        assert_operator served.index("/fresh"), :<, served.index("/hog/3"), "served: #{served.inspect}"
      ensure
        fresh&.close
      end
    end

    # A lone pipelining client still gets every answer in order (its requests are served back
    # to back while its turn lasts, then through the event loop).
    def test_a_long_pipeline_is_answered_in_order
      app = lambda do |env|
        sleep 0.002 if env["PATH_INFO"].end_with?("0")
        [200, { "content-type" => "text/plain" }, [env["PATH_INFO"]]]
      end
      with_server(app, min_threads: 1, max_threads: 1) do |_host, port|
        sock = TCPSocket.new("127.0.0.1", port)
        count = 300
        sock.write((1..count).map { |i| "GET /#{i} HTTP/1.1\r\nHost: x\r\n\r\n" }.join)
        bodies = Array.new(count) { read_response(sock)[2] }
        assert_equal (1..count).map { |i| "/#{i}" }, bodies
      ensure
        sock&.close
      end
    end
  end
end
