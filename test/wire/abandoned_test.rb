# frozen_string_literal: true

require_relative "../test_helper"

module Margay
  # A request whose client closed its side while the request waited for a thread is not run
  # (issue 12 §4; Puma's closed_socket? check): wrk's connections at the end of a run, or
  # clients that timed out under overload, would otherwise each cost a full app call ahead of
  # the live clients. A client that pipelines requests and then half-closes is still answered.
  # One thread and an app held on a gate make the order deterministic (no timing).
  class AbandonedTest < Minitest::Test
    include TestHelper

    GET = "GET %s HTTP/1.1\r\nHost: x\r\n\r\n"

    def setup
      @seen = Queue.new
      @entered = Queue.new
      @gate = Queue.new
      @app = lambda do |env|
        path = env["PATH_INFO"]
        @seen << path
        if path == "/hold"
          @entered << true
          @gate.pop
        end
        [200, { "content-type" => "text/plain" }, [path]]
      end
    end

    # A kept-alive connection (its first request served), so its next request comes through
    # the event loop.
    def kept_alive(port, name)
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write(format(GET, "/#{name}"))
      assert_equal [200, "/#{name}"], read_response(sock).values_at(0, 2)
      assert_equal "/#{name}", pop_within(@seen)
      sock
    end

    # Holds the only thread in the app on /hold, yields while it is held, then releases it.
    def while_held(port)
      holder = TCPSocket.new("127.0.0.1", port)
      holder.write(format(GET, "/hold"))
      pop_within(@entered)
      assert_equal "/hold", pop_within(@seen)
      yield
      @gate << true
      assert_equal 200, read_response(holder).first
    ensure
      holder&.close
    end

    # A kept-alive client that sends +bytes+, then closes its side, while the thread is held;
    # its socket, once the thread is free again.
    def closed_while_held(port, bytes)
      client = kept_alive(port, "warm")
      while_held(port) do
        client.write(bytes)
        client.close_write
        wait_acked(client)
      end
      client
    end

    def test_a_request_whose_client_closed_while_it_waited_is_not_run
      with_server(@app, min_threads: 1, max_threads: 1) do |_host, port, server|
        gone = kept_alive(port, "warm-gone")
        live = kept_alive(port, "warm-live")
        while_held(port) do
          gone.write(format(GET, "/gone"))
          gone.close_write # the client gives up: FIN after its request
          wait_acked(gone)
          live.write(format(GET, "/live"))
          wait_acked(live)
        end
        assert_equal [200, "/live"], read_response(live).values_at(0, 2)
        assert_equal "/live", pop_within(@seen), "the abandoned /gone never reached the app"
        assert_equal "", read_all(gone, timeout: 5), "closed without an answer"
        assert_equal 1, server.stats[:abandoned]
        assert_equal 4, server.stats[:requests], "warm-gone, warm-live, hold, live: what ran (refork_after, out_of_band_gc count these)"
      ensure
        gone&.close
        live&.close
      end
    end

    def test_pipelined_requests_followed_by_a_half_close_are_all_answered
      with_server(@app, min_threads: 1, max_threads: 1) do |_host, port, server|
        client = closed_while_held(port, format(GET, "/one") + format(GET, "/two"))
        assert_equal [200, "/one"], read_response(client).values_at(0, 2)
        assert_equal [200, "/two"], read_response(client).values_at(0, 2)
        assert_equal %w[/one /two], [pop_within(@seen), pop_within(@seen)]
        assert_equal 0, server.stats[:abandoned]
      ensure
        client&.close
      end
    end

    # More pipelined requests than one read takes, then a FIN. A connection's buffer starts at
    # 4 KiB: 128 of these 32-byte requests fill it exactly, so the 129th comes alone in a later
    # read, on an event that carries the FIN, framed from an empty buffer. It is answered too.
    def test_a_long_pipeline_followed_by_a_half_close_is_answered_to_the_end
      paths = Array.new(129) { |i| format("/p/%03d", i) }
      assert_equal 32, format(GET, paths.last).bytesize
      with_server(@app, min_threads: 1, max_threads: 1) do |_host, port, server|
        client = closed_while_held(port, paths.map { |path| format(GET, path) }.join)
        answers = paths.map { read_response(client).values_at(0, 2) }
        assert_equal paths.map { |path| [200, path] }, answers
        assert_equal paths, Array.new(paths.size) { pop_within(@seen) }
        assert_equal 0, server.stats[:abandoned]
      ensure
        client&.close
      end
    end

    # A request with a body is run even when its client has closed (it may change something
    # the client expects changed); only bodiless requests are dropped.
    def test_a_request_with_a_body_is_run_though_its_client_closed
      with_server(@app, min_threads: 1, max_threads: 1) do |_host, port, server|
        client = closed_while_held(port, "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
        assert_equal [200, "/post"], read_response(client).values_at(0, 2)
        assert_equal "/post", pop_within(@seen)
        assert_equal 0, server.stats[:abandoned]
      ensure
        client&.close
      end
    end
  end
end
