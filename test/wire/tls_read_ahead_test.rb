# frozen_string_literal: true

require "test_helper"
require "margay/native"
require "support/tls_certs"
require "support/held_tls"

# Every TLS session reads ahead (core/tls_ctx.c): one read takes all the records the socket
# has. Those not decrypted yet are input epoll does not announce, so a connection holding them
# must be served without waiting for the socket. These tests send records together, cut and
# late (Margay::HeldTLS decides what reaches the server when); each hangs where a connection
# with such input waits for epoll.
class TLSReadAheadTest < Minitest::Test
  skip_on_jruby "no TLS in the pure-Ruby engine (ssl:// binds are refused at start)"
  include Margay::TestHelper
  include Margay::TLSClient

  CERTS = Margay::TLSCerts
  PATH_APP = ->(env) { [200, { "content-type" => "text/plain" }, [env["PATH_INFO"]]] }

  def setup
    skip "built without OpenSSL" unless Margay::Native::TLS
    skip "no openssl command" unless CERTS.cli?
  end

  def with_tls(app, query: "", **settings, &block)
    bind = "ssl://127.0.0.1:0?cert=#{CERTS.path('rsa.pem')}&key=#{CERTS.path('rsa.key')}#{query}"
    with_server(app, binds: [bind], **settings) { |_host, port, server| block.call(port, server) }
  end

  # A server for +app+ and a Margay::HeldTLS client of it (handshake done, Finished held).
  def with_held_client(app = PATH_APP, alpn: nil, **settings)
    with_tls(app, **settings) do |port|
      client = Margay::HeldTLS.new(port, alpn: alpn)
      yield client
    ensure
      client&.close
    end
  end

  def get(path) = "GET #{path} HTTP/1.1\r\nHost: x\r\n\r\n"

  # The bodies of the next +n+ responses on +client+; a failure if they do not come in 5 s.
  def bodies(client, n)
    Timeout.timeout(5) { Array.new(n) { read_tls_response(client.ssl)[2] } }
  rescue Timeout::Error
    flunk "no answer within 5 s: input the session read ahead was left waiting for the socket"
  end

  # Everything the client reads until the server's close_notify (or the socket's end).
  def read_to_end(ssl)
    data = +""
    Timeout.timeout(5) { loop { data << ssl.readpartial(65_536) } }
  rescue EOFError, Errno::ECONNRESET
    data
  rescue Timeout::Error
    flunk "no end within 5 s (read so far: #{data.inspect})"
  end

  def test_pipelined_requests_in_one_record_sent_with_the_finished
    with_held_client do |client|
      client.deliver(client.held + client.seal(get("/a") + get("/b")))
      assert_equal %w[/a /b], bodies(client, 2)
    end
  end

  # Each request its own record, all read by one read: after the first one's response the
  # others are in the session only.
  def test_pipelined_requests_in_records_that_arrive_together
    with_held_client do |client|
      client.deliver(client.held + client.seal(get("/a"), get("/b"), get("/c")))
      assert_equal %w[/a /b /c], bodies(client, 3)
      client.deliver(client.seal(get("/d"), get("/e")))
      assert_equal %w[/d /e], bodies(client, 2)
    end
  end

  # A request's head cut inside its first record's header and then its body, arriving over
  # 200 ms; the bytes that complete it bring the next request's whole record along. (OpenSSL
  # reads the rest of a record it has begun exactly: the records after it stay in the socket,
  # announced. The read that starts with a header reads ahead.)
  def test_a_request_split_across_records_arriving_slowly
    with_held_client do |client|
      client.deliver(client.held)
      client.deliver(client.seal(get("/first")))
      assert_equal ["/first"], bodies(client, 1)
      head = client.seal("GET /slow HT")
      rest = client.seal("TP/1.1\r\nHost: x\r\n\r\n", get("/after"))
      client.deliver(head[0, 3])
      sleep 0.1
      client.deliver(head[3, 7])
      sleep 0.1
      client.deliver(head[10..] + rest)
      assert_equal %w[/slow /after], bodies(client, 2)
    end
  end

  # A head begun in one record whose next record stops short: still bounded by header_timeout.
  def test_a_record_cut_short_is_answered_408_after_header_timeout
    with_held_client(header_timeout: 1) do |client|
      first = client.seal("GET /stalled HTTP/1.1\r\n")
      cut = client.seal("Host: x\r\n\r\n")
      client.deliver(client.held + first + cut[0, cut.bytesize - 5])
      reply = read_to_end(client.ssl)
      assert_match(%r{\AHTTP/1.1 408 }, reply)
    end
  end

  # The client sends on while a large response is written: the records that came with the
  # first request wait in the session until the response is out, and so do those sent meanwhile.
  def test_the_next_requests_sent_while_the_response_is_written
    big = "x" * (16 << 20) # more than the socket buffers on the way hold
    app = lambda do |env|
      body = env["PATH_INFO"] == "/big" ? big : env["PATH_INFO"]
      [200, { "content-type" => "text/plain", "content-length" => body.bytesize.to_s }, [body]]
    end
    with_held_client(app) do |client|
      client.deliver(client.held + client.seal(get("/big"), get("/one")))
      sleep 0.2 # the server's socket fills; the client reads nothing yet
      client.deliver(client.seal(get("/two"), get("/three")))
      got = Timeout.timeout(20) { read_tls_response(client.ssl)[2] }
      assert_equal big.bytesize, got.bytesize
      assert_equal %w[/one /two /three], bodies(client, 3)
    end
  end

  def test_records_read_ahead_in_fiber_mode
    skip "fiber mode needs epoll" unless BACKEND == :auto || BACKEND == :epoll
    with_held_client(fiber_scheduler: true) do |client|
      client.deliver(client.held + client.seal(get("/a"), get("/b"), get("/c")))
      assert_equal %w[/a /b /c], bodies(client, 3)
    end
  end

  # The only thread runs /b1 on a connection whose /b2 came in a record of its own with it (read
  # ahead), then /a (1.5 s) from another connection, whose request was ready first: /b2 waits
  # in the session meanwhile. Yields [the /b1 client, the /a client] once /a runs.
  def held_behind_a_slow_request(port)
    started = Queue.new
    go = Queue.new
    @app_calls = {
      "/b1" => lambda {
        started << :b1
        go.pop
      },
      "/a" => lambda {
        started << :a
        sleep 1.5
      }
    }
    held = Margay::HeldTLS.new(port)
    held.deliver(held.held)
    slow = tls_socket(port)
    held.deliver(held.seal(get("/b1"), get("/b2")))
    assert_equal :b1, pop_within(started)
    yield :b1_running, held, slow
    slow.write(get("/a")) # ready before /b2's connection is handed back
    sleep 0.2
    go << :go
    assert_equal :a, pop_within(started)
    yield :a_running, held, slow
  ensure
    [held, slow].each { |c| c&.close }
  end

  def scripted_app
    lambda do |env|
      @app_calls[env["PATH_INFO"]]&.call
      [200, { "content-type" => "text/plain" }, [env["PATH_INFO"]]]
    end
  end

  # At max_connections the sweep closes kept-alive connections idle for a second to make room.
  # One whose next request waits read ahead in its session is not idle.
  def test_a_connection_with_records_read_ahead_is_not_reclaimed_at_the_limit
    with_tls(scripted_app, min_threads: 1, max_threads: 1, max_connections: 2) do |port|
      held_behind_a_slow_request(port) do |step, held, slow|
        if step == :b1_running
          @knock = TCPSocket.new("127.0.0.1", port) # over the limit: accepting pauses
          sleep 0.2
        else
          assert_equal %w[/b1 /b2], Timeout.timeout(10) { Array.new(2) { read_tls_response(held.ssl)[2] } }
          assert_equal "/a", read_tls_response(slow)[2]
        end
      end
    ensure
      @knock&.close
    end
  end

  # A graceful stop closes idle kept-alive connections at once; one whose next request waits
  # read ahead in its session is served (its answer says close).
  def test_a_stop_serves_the_request_read_ahead
    with_tls(scripted_app, min_threads: 1, max_threads: 1) do |port, server|
      held_behind_a_slow_request(port) do |step, held, _slow|
        next if step == :b1_running

        stopping = Thread.new { server.stop }
        got = Timeout.timeout(10) { Array.new(2) { read_tls_response(held.ssl) } }
        assert_equal %w[/b1 /b2], got.map { |r| r[2] }
        assert_match(/^connection: close/i, got.last[1])
        stopping.join(10)
      end
    end
  end

  # An HTTP/2 frame: length, type, flags, stream, payload.
  def frame(type, flags, stream, payload = "".b)
    [payload.bytesize >> 16, payload.bytesize & 0xffff, type, flags, stream].pack("CnCCN") + payload
  end

  # ALPN h2 with the connection preface, SETTINGS and a GET sent with the Finished: read in the
  # handshake's last read, they are HTTP/2's input once the session chooses h2.
  def test_h2_by_alpn_with_its_first_frames_sent_with_the_finished
    with_held_client(query: "&http2=true", alpn: ["h2"]) do |client|
      assert_equal "h2", client.ssl.alpn_protocol
      block = "\x82\x87\x84\x41\x09localhost".b # GET https / (HPACK static), :authority localhost
      preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
      client.deliver(client.held + client.seal(preface, frame(4, 0, 0), frame(1, 5, 1, block)))
      data = Timeout.timeout(5) do
        loop do
          high, low, type, flags, stream = client.ssl.read(9).unpack("CnCCN")
          payload = client.ssl.read((high << 16) | low)
          break payload if type.zero? && stream == 1 && flags.allbits?(1) # DATA, END_STREAM
        end
      end
      assert_equal "/", data
    end
  end

  # The hijacked IO sees the record read ahead after the request (in the session, not the
  # socket): wait_readable says so and the read returns it.
  def test_hijack_after_a_pipelined_request
    app = lambda do |env|
      io = env["rack.hijack"].call
      said = io.wait_readable(5) ? io.readpartial(100) : "nothing readable"
      io.write("HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n#{said}")
      io.close
      [200, {}, []]
    end
    with_held_client(app, lint: false) do |client|
      client.deliver(client.held + client.seal(get("/"), "ping"))
      assert_equal "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nping", read_to_end(client.ssl)
    end
  end
end
