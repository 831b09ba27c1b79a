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

    # The backlog is taken as it stands when the listener's turn comes (not 64 at a time, the
    # listener going to the back of the ready list after each batch): no request of a keep-alive
    # client sent after them overtakes the backlog's clients. 80 clients wait in the backlog
    # while the only thread is busy; a keep-alive client's second request is sent while the
    # second of them is in the app.
    def test_a_kept_alive_client_does_not_overtake_a_deep_backlog
      skip_on_jruby "the pure engine's reactor accepts the backlog while every pool thread is busy, so it is served first come, first served"
      order = Queue.new
      gates = { "/gate" => Queue.new, "/c/2" => Queue.new }
      started = Queue.new
      app = lambda do |env|
        path = env["PATH_INFO"]
        order << path
        if (gate = gates[path])
          started << path
          gate.pop
        end
        [200, { "content-type" => "text/plain" }, [path]]
      end
      backlog = 80
      with_server(app, min_threads: 1, max_threads: 1) do |_host, port|
        kept = TCPSocket.new("127.0.0.1", port)
        kept.write("GET /warm HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal 200, read_response(kept).first
        busy = TCPSocket.new("127.0.0.1", port)
        busy.write("GET /gate HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal "/gate", pop_within(started)
        clients = Array.new(backlog) do |i|
          TCPSocket.new("127.0.0.1", port).tap { |s| s.write("GET /c/#{i + 1} HTTP/1.1\r\nHost: x\r\n\r\n") }
        end
        clients.each { |s| wait_acked(s) }
        kept.write("GET /k/1 HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_acked(kept)
        gates["/gate"] << true
        assert_equal "/k/1", read_response(kept)[2]
        assert_equal "/c/2", pop_within(started)
        kept.write("GET /k/2 HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_acked(kept)
        gates["/c/2"] << true
        assert_equal "/k/2", read_response(kept)[2]
        clients.each_with_index { |s, i| assert_equal "/c/#{i + 1}", read_response(s)[2] }
        served = Array.new(backlog + 4) { pop_within(order) }
        assert_equal "/k/2", served.last, "served: #{served.inspect}"
      ensure
        [kept, busy, *clients].each { |s| s&.close }
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
