# frozen_string_literal: true

require "test_helper"
require "support/websocket_client"
require "support/websocket_echo"

# Connection upgrades through a Rack 3 streaming body (lib/margay/server/upgrade.rb)
# over real sockets: rack.protocol, the 101 head, the raw stream afterwards,
# a real WebSocket client (websocket-driver) talking both ways, timeouts and
# a graceful stop.
class UpgradeTest < Minitest::Test
  include Margay::TestHelper

  UPGRADE = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"

  WS_ECHO = Margay::WebSocketEcho

  def test_rack_protocol_from_the_upgrade_header
    seen = Queue.new
    app = lambda do |env|
      seen << env.fetch("rack.protocol", :unset)
      [200, { "content-length" => "0" }, []]
    end
    with_server(app) do |_, port|
      {
        "Upgrade: websocket\r\nConnection: Upgrade\r\n" => ["websocket"],
        "Upgrade: h2c, websocket\r\nConnection: keep-alive, upgrade\r\n" => %w[h2c websocket],
        "Upgrade: websocket\r\n" => :unset, # not a connection option: not an upgrade (RFC 9110 7.8)
        "Connection: upgrade\r\n" => :unset
      }.each do |fields, expected|
        raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n#{fields}Connection: close\r\n\r\n")
        assert_equal expected, pop_within(seen), fields
      end
      # an HTTP/1.0 request's Upgrade is ignored
      raw_exchange(port, "GET / HTTP/1.0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
      assert_equal :unset, pop_within(seen)
    end
  end

  # The issue's app: 101 with connection and upgrade, then the stream is the
  # raw connection both ways; it closes when the body's call returns.
  def test_upgrade_through_a_streaming_body
    app = lambda do |_env|
      body = lambda do |stream|
        stream.write("hello\n")
        while (line = read_line(stream)) != "quit\n"
          stream << line.upcase
        end
        stream.write("bye\n")
      end
      [101, { "connection" => "upgrade", "upgrade" => "echo" }, body]
    end
    with_server(app) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write(UPGRADE)
      head = sock.readpartial(4096)
      status_line, *fields = head.split("\r\n")
      assert_equal "HTTP/1.1 101 Switching Protocols", status_line
      assert_includes fields, "connection: upgrade"
      assert_includes fields, "upgrade: echo"
      refute(fields.any? { |f| f.match?(/\A(content-length|transfer-encoding):/i) }, head)
      rest = head.split("\r\n\r\n", 2)[1]
      rest += sock.readpartial(4096) until rest.include?("\n")
      assert_equal "hello\n", rest
      sock.write("one\ntwo\n")
      assert_equal "ONE\nTWO\n", read_exactly(sock, 8)
      sock.write("quit\n")
      assert_equal "bye\n", read_all(sock), "no HTTP framing after the 101"
      assert_nil sock.read_nonblock(1, exception: false), "the connection closed when call returned"
    ensure
      sock&.close
    end
  end

  # A client that speaks right after its request, in the same packet: the
  # stream gives those bytes first.
  def test_bytes_sent_with_the_request_are_read_first
    app = lambda do |_env|
      [101, { "upgrade" => "echo" }, ->(stream) { stream.write(stream.read(5).reverse) }]
    end
    with_server(app) do |_, port|
      response = raw_exchange(port, "#{UPGRADE}hello")
      assert_match(/\AHTTP\/1\.1 101 Switching Protocols\r\n/, response)
      assert_equal "olleh", response.split("\r\n\r\n", 2)[1]
    end
  end

  # Rack 3.1's way: the rack.protocol response header picks one of the
  # request's protocols; the server answers 101 with it as upgrade.
  def test_rack_protocol_response_header
    app = lambda do |env|
      [200, { "rack.protocol" => env["rack.protocol"].last }, ->(stream) { stream.write("switched") }]
    end
    with_server(app) do |_, port|
      response = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c, echo\r\nConnection: upgrade\r\n\r\n")
      head, body = response.split("\r\n\r\n", 2)
      status_line, *fields = head.split("\r\n")
      assert_equal "HTTP/1.1 101 Switching Protocols", status_line
      assert_includes fields, "upgrade: echo"
      assert_includes fields, "connection: upgrade"
      refute(fields.any? { |f| f.start_with?("rack.") })
      assert_equal "switched", body
    end
  end

  # A real WebSocket client (websocket-driver) against a Rack 3 app that
  # upgrades through its streaming body, under Rack::Lint: handshake, messages
  # both ways, a close handshake started by the server.
  def test_websocket_round_trip
    with_server(WS_ECHO) do |_, port|
      client = Margay::WebSocketClient.new(port, "/chat")
      assert client.open?, "handshake accepted"
      assert_equal 101, client.status
      assert_equal "websocket", client.headers["Upgrade"]
      %w[hello wörld].each do |message|
        client.text(message)
        assert_equal "echo: #{message}", client.receive
      end
      big = "x" * 70_000 # a 64-bit length frame
      client.text(big)
      assert_equal "echo: #{big}", client.receive
      client.text("bye")
      assert_equal "echo: bye", client.receive
      assert_equal 1000, client.closed&.code, "the server closed with a close frame"
    ensure
      client&.close
    end
  end

  # Several WebSocket clients at once, each on its own pool thread.
  def test_websockets_side_by_side
    with_server(WS_ECHO, min_threads: 4, max_threads: 4) do |_, port|
      clients = Array.new(3) { Margay::WebSocketClient.new(port) }
      clients.each { |c| assert c.open? }
      clients.each_with_index { |c, i| c.text("client #{i}") }
      clients.each_with_index { |c, i| assert_equal "echo: client #{i}", c.receive }
      # plain requests are still served meanwhile
      assert_match(/\AHTTP\/1\.1 426 /, raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    ensure
      clients&.each(&:close)
    end
  end

  # readpartial (beyond the SPEC's minimum, as Falcon's stream has it) returns
  # what arrived; a client that closes ends the stream.
  def test_readpartial_and_end_of_stream
    seen = Queue.new
    app = lambda do |_env|
      body = lambda do |stream|
        seen << stream.readpartial(100)
        seen << stream.read
        seen << stream.read(10)
      end
      [101, { "upgrade" => "echo" }, body]
    end
    with_server(app, lint: false) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write(UPGRADE)
      assert_equal 101, read_response(sock)[0]
      sock.write("abc")
      assert_equal "abc", pop_within(seen)
      sock.write("def")
      sock.close_write
      assert_equal "def", pop_within(seen), "read to the end"
      assert_nil pop_within(seen), "read(10) at the end"
    ensure
      sock&.close
    end
  end

  # An upgraded stream whose client says nothing for keepalive_timeout is
  # closed: the app's read raises ClientGone, the client sees the end.
  def test_an_idle_upgraded_stream_is_closed
    raised = Queue.new
    app = lambda do |_env|
      body = lambda do |stream|
        stream.read(1)
      rescue Margay::ClientGone => e
        raised << e
        raise
      end
      [101, { "upgrade" => "echo" }, body]
    end
    with_server(app, keepalive_timeout: 1) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write(UPGRADE)
      assert_equal 101, read_response(sock)[0]
      assert_closed sock
      assert_match(/no data from the client/, pop_within(raised, 10).message)
    ensure
      sock&.close
    end
    refute_match(/app error/, @last_server_log, "a client gone quiet is no app error")
  end

  # An upgraded stream whose client stops reading: a write waits at most
  # write_timeout, then the stream closes and the write raises ClientGone.
  def test_a_write_to_a_client_that_stopped_reading_times_out
    raised = Queue.new
    app = lambda do |_env|
      body = lambda do |stream|
        chunk = "x" * 65_536
        loop { stream.write(chunk) }
      rescue Margay::ClientGone => e
        raised << e
        raise
      end
      [101, { "upgrade" => "echo" }, body]
    end
    with_server(app, write_timeout: 1) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write(UPGRADE)
      assert_equal 101, read_response(sock)[0]
      assert_match(/write timeout/, pop_within(raised, 20).message)
    ensure
      sock&.close
    end
  end

  # A graceful stop ends the reads of upgraded streams: the app's read
  # returns end of stream, it writes its goodbye, the connection closes and
  # the server stops (not cut at shutdown_timeout: the goodbye arrives).
  def test_a_graceful_stop_ends_an_upgraded_stream
    entered = Queue.new
    app = lambda do |_env|
      [101, { "upgrade" => "echo" }, lambda { |stream|
        entered << true
        stream.write("read #{stream.read(1).inspect}, goodbye")
      }]
    end
    sock = nil
    with_server(app, min_threads: 2) do |_, port, server, thread|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write(UPGRADE)
      assert_equal 101, read_response(sock)[0]
      pop_within(entered)
      server.stop
      assert_equal "read nil, goodbye", read_all(sock, timeout: 20)
      assert_closed sock
      assert thread.join(20), "the server stopped"
    end
  ensure
    sock&.close
  end

  # An upgraded stream that ignores the end of its reads (it never reads
  # again) is interrupted when shutdown_timeout passes.
  def test_a_graceful_stop_interrupts_an_upgraded_stream_at_shutdown_timeout
    entered = Queue.new
    app = lambda do |_env|
      [101, { "upgrade" => "echo" }, lambda { |_stream|
        entered << true
        sleep
      }]
    end
    sock = nil
    with_server(app, shutdown_timeout: 1) do |_, port, server, thread|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write(UPGRADE)
      assert_equal 101, read_response(sock)[0]
      pop_within(entered)
      server.stop
      assert thread.join(20), "the server stopped"
    end
    assert_closed sock
  ensure
    sock&.close
  end

  # A graceful stop (Engine#stop, then Upgrade.stop_reading, as Server#shutdown
  # does): a read waiting on an upgraded stream returns end of stream at once,
  # the app still writes its goodbye, the connection closes when call returns;
  # a request in flight that upgrades after the stop began starts ended.
  def test_stop_reading_ends_the_reads_of_upgraded_streams
    skip_on_jruby "the pure engine's stop itself ends the stream's read at times (end of stream before Upgrade.stop_reading, cause not found), so the count asserted here varies there"
    entered = Queue.new
    arrived = Queue.new
    release = Queue.new
    app = lambda do |env|
      if env["PATH_INFO"] == "/late"
        arrived << true
        release.pop
      end
      [101, { "upgrade" => "echo" }, lambda { |stream|
        entered << true
        got = stream.read(1)
        stream.write("read #{got.inspect}, goodbye")
      }]
    end
    with_server(app) do |_, port, server|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write(UPGRADE)
      assert_equal 101, read_response(sock)[0]
      pop_within(entered)
      late = TCPSocket.new("127.0.0.1", port)
      late.write(UPGRADE.sub("GET / ", "GET /late "))
      pop_within(arrived) # in flight when the stop begins

      server.engine.stop
      assert_equal 1, Margay::Server::Upgrade.stop_reading(server.engine)
      assert_equal "read nil, goodbye", read_all(sock)
      assert_closed sock

      release << true
      assert_equal "read nil, goodbye", read_all(late).split("\r\n\r\n", 2)[1], "upgraded after the stop began"
      assert_equal 0, Margay::Server::Upgrade.stop_reading(server.engine)
    ensure
      sock&.close
      late&.close
    end
  end

  # The response to an upgrade request that the app declines is an ordinary
  # one, and the connection stays usable.
  def test_a_declined_upgrade_keeps_the_connection
    app = ->(env) { [200, { "content-length" => "2" }, [env.key?("rack.protocol") ? "up" : "no"]] }
    with_server(app) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write(UPGRADE)
      status, headers, body = read_response(sock)
      assert_equal [200, "up"], [status, body]
      assert_nil headers["connection"]
      sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal [200, "no"], read_response(sock).values_at(0, 2)
    ensure
      sock&.close
    end
  end

  # A streaming body reading its request body through the stream, under
  # Rack::Lint (it used to pass an explicit nil buffer to rack.input#read).
  def test_stream_read_under_lint
    app = lambda do |_env|
      [200, {}, lambda { |stream|
        data = stream.read
        stream.write("#{data.bytesize}:#{data}")
        buffer = +""
        stream.write("|#{stream.read(3, buffer).inspect}")
        stream.close
      }]
    end
    with_server(app) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
      status, _, body = read_response(sock)
      assert_equal [200, "5:hello|nil"], [status, body]
    ensure
      sock&.close
    end
  end

  private

  # The server closed +sock+ without sending anything more.
  def assert_closed(sock)
    assert sock.wait_readable(10), "the server closed the connection"
    assert_nil sock.read_nonblock(1, exception: false)
  rescue Errno::ECONNRESET
    pass
  end

  def read_line(stream)
    line = +""
    while (byte = stream.read(1))
      line << byte
      return line if byte == "\n"
    end
    line
  end

  def read_exactly(sock, n)
    data = +""
    data << sock.readpartial(n - data.bytesize) while data.bytesize < n
    data
  end
end
