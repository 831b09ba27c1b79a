# frozen_string_literal: true

require "test_helper"

# rack.hijack over real sockets: full hijack (env["rack.hijack"].call) and
# partial hijack (the rack.hijack response header).
class HijackTest < Minitest::Test
  include Margay::TestHelper

  UPGRADE = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"

  # A partial-hijack app: a 101 head, then +talk+ gets the socket.
  def upgrading(&talk)
    ->(_env) { [101, { "upgrade" => "echo", "connection" => "upgrade", "rack.hijack" => talk }, []] }
  end

  def test_full_hijack
    app = lambda do |env|
      io = env["rack.hijack"].call
      io.write("HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhijacked")
      io.close
      [200, {}, []]
    end
    with_server(app) do |_, port|
      assert_equal "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhijacked",
                   raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    end
  end

  def test_partial_hijack
    app = upgrading do |io|
      io.write(io.read(4).upcase)
      io.close
    end
    with_server(app) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write(UPGRADE)
      status, headers, = read_response(sock)
      assert_equal [101, "echo"], [status, headers["upgrade"]]
      assert_equal "upgrade", headers["connection"], "a 101 names upgrade as a connection option"
      refute headers.key?("content-length")
      refute headers.key?("transfer-encoding")
      sock.write("ping")
      assert_equal "PING", read_all(sock)
    ensure
      sock&.close
    end
  end

  # A client that speaks right after its Upgrade request, in the same write:
  # the engine has read those bytes already, and the app must still get them.
  # +reader+ gets the hijacked socket and returns what the app read.
  def assert_app_reads_the_bytes_sent_with_the_request(full:, lint: true, &reader)
    got = Queue.new
    talk = lambda do |io|
      got << reader.call(io)
      io.close
    end
    full_hijack = lambda do |env|
      talk.call(env["rack.hijack"].call)
      [200, {}, []]
    end
    app = full ? full_hijack : upgrading(&talk)
    with_server(app, lint: lint) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("#{UPGRADE}PING\n")
      assert_equal "PING\n", pop_within(got)
      assert_equal 101, read_response(sock)[0] unless full
    ensure
      sock&.close # ends the app's read if the bytes were lost
    end
  end

  def test_full_hijack_gets_the_bytes_sent_with_the_request
    assert_app_reads_the_bytes_sent_with_the_request(full: true) { |io| io.read(5) }
  end

  def test_partial_hijack_gets_the_bytes_sent_with_the_request
    assert_app_reads_the_bytes_sent_with_the_request(full: false) { |io| io.read(5) }
  end

  # An app waiting for input with IO.select (or wait_readable) sees those
  # bytes as readable at once (no Rack::Lint here: its wrapper is no IO).
  def test_bytes_sent_with_the_request_are_readable_for_select
    assert_app_reads_the_bytes_sent_with_the_request(full: true, lint: false) do |io|
      IO.select([io], nil, nil, 2) ? io.read_nonblock(100) : :not_readable
    end
  end

  # A rack.hijack or rack.early_hints kept from an earlier request (the engine makes them for
  # a plain request: Native::Engine#request_objects) acts on no later one: on the same
  # connection and thread, the stale hijack raises ClientGone and the stale early hints send
  # nothing; the later request is answered as usual. Thread and fiber mode.
  def test_stale_hijack_and_early_hints_act_on_no_later_request
    modes = [{}]
    modes << { fiber_scheduler: true, event_backend: :auto } unless RUBY_ENGINE == "jruby"
    modes.each do |mode|
      kept = []
      app = lambda do |env|
        if kept.empty?
          kept.push(env["rack.hijack"], env["rack.early_hints"])
          next [200, { "content-length" => "5" }, ["first"]]
        end
        hijack, hints = kept
        outcome = begin
          hijack.call
          "hijacked"
        rescue Margay::ClientGone
          "refused"
        end
        hints.call({ "link" => "</stale.css>; rel=preload" })
        [200, { "content-length" => outcome.bytesize.to_s }, [outcome]]
      end
      with_server(app, lint: false, min_threads: 1, max_threads: 1, **mode) do |_, port|
        sock = TCPSocket.new("127.0.0.1", port)
        sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal [200, "first"], read_response(sock).values_at(0, 2)
        sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal [200, "refused"], read_response(sock).values_at(0, 2), mode.inspect
      ensure
        sock&.close
      end
    end
  end

  # The rack.hijack response field wins over an Array body, which is ignored (Engine#respond
  # sends nothing and answers false): even parts that are no Strings do not make it a 500.
  def test_partial_hijack_ignores_an_array_body
    talk = lambda do |io|
      io.write("taken")
      io.close
    end
    app = ->(_env) { [200, { "rack.hijack" => talk }, [:not_a_string]] }
    with_server(app, lint: false) do |_, port|
      raw = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 200 OK\r\n.*\r\n\r\ntaken\z}m, raw)
    end
  end
end
