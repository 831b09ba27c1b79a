# frozen_string_literal: true

require "test_helper"
require "digest/sha2" # at load: threads autoloading Digest::SHA256 at once race
require "json"
require "open3"
require "openssl"
require "tempfile"
require "margay/native"
require "support/h2_clients"

# HTTP/2 done by the engine (ext/margay/core/h2.c) over real sockets: ALPN h2 on an ssl:// bind
# and h2c with prior knowledge on a tcp:// bind (http2=true), with curl, nghttp and raw frames
# (test/support/h2_frames.py on Debian's python3-h2) as clients.
class H2Test < Minitest::Test
  include Margay::TLSClient
  include Margay::H2Clients
  skip_on_jruby "no HTTP/2 in the pure-Ruby engine (http2=true binds are refused at start)"
  include Margay::TestHelper

  ECHO = lambda do |env|
    body = env["rack.input"].read
    keys = %w[SERVER_PROTOCOL REQUEST_METHOD PATH_INFO QUERY_STRING REQUEST_URI HTTP_HOST SERVER_NAME SERVER_PORT
              HTTP_COOKIE CONTENT_LENGTH CONTENT_TYPE rack.url_scheme rack.hijack?]
    lines = keys.map { |k| "#{k}=#{env[k].inspect}" }
    lines << "hijack=#{env.key?('rack.hijack')}" << "body=#{Digest::SHA256.hexdigest(body)}:#{body.bytesize}"
    [200, { "content-type" => "text/plain", "connection" => "keep-alive" }, [lines.join("\n")]]
  end

  # ECHO with a field name in capitals, which Rack 3 forbids and the server lowercases anyway.
  ECHO_CAPITALS = lambda do |env|
    status, headers, body = ECHO.call(env)
    [status, headers.merge("X-Mixed-Case" => "yes"), body]
  end

  def setup
    skip_without_h2
  end

  # A server with an ssl:// and a tcp:// bind, both http2=true (or +binds+): yields their ports.
  def with_h2_server(app, binds: h2_binds, **settings)
    with_server(app, binds: binds, **settings) do |_host, _port, server|
      yield(*server.addresses.map { |a| a[/:(\d+)\z/, 1].to_i }, server)
    end
  end

  def curl(*args)
    skip "no curl" unless system(CLIENT, "curl", "--version", out: File::NULL, err: File::NULL)
    out, err, status = Open3.capture3(CLIENT, "curl", "-sS", "--max-time", "20", "--cacert", CERTS.path("ca.pem"), *args)
    assert status.success?, "curl #{args.join(' ')}: #{err}"
    [out, err]
  end

  # Runs h2_frames.py against +port+; its JSON line.
  def frames(port, *args)
    skip_without_python_h2
    h2_client(FRAMES, port, *args)
  end

  def test_get_over_tls_by_alpn_with_the_http11_env_rules
    with_h2_server(ECHO_CAPITALS, lint: false) do |tls, _plain|
      out, err = curl("--http2", "-v", "-H", "cookie: a=1", "-H", "cookie: b=2", "https://localhost:#{tls}/p/a?x=1&y=2")
      assert_includes err, "ALPN: server accepted h2"
      assert_match(%r{^< HTTP/2 200}, err)
      assert_match(/^< x-mixed-case: yes/, err, "field names go out lowercased")
      refute_match(/^< connection/i, err, "connection-specific fields are dropped")
      assert_match(/^< content-length: \d+/, err)
      assert_match(/^< date: /, err)
      assert_includes out, %(SERVER_PROTOCOL="HTTP/2")
      assert_includes out, %(PATH_INFO="/p/a")
      assert_includes out, %(QUERY_STRING="x=1&y=2")
      assert_includes out, %(REQUEST_URI="/p/a?x=1&y=2")
      assert_includes out, %(HTTP_HOST="localhost:#{tls}")
      assert_includes out, %(SERVER_NAME="localhost")
      assert_includes out, %(SERVER_PORT="#{tls}")
      assert_includes out, %(HTTP_COOKIE="a=1; b=2")
      assert_includes out, %(rack.url_scheme="https")
      assert_includes out, %(rack.hijack?=false)
      assert_includes out, "hijack=false"
    end
  end

  def test_post_bodies_in_memory_and_in_a_tempfile
    with_h2_server(ECHO, body_buffer_size: 4096) do |tls, plain|
      [10, 3 * 1024 * 1024].each do |size|
        data = Random.new(size).bytes(size)
        Tempfile.create("h2-body") do |f|
          f.binmode
          f.write(data)
          f.flush
          out, = curl("--http2", "--data-binary", "@#{f.path}", "-H", "content-type: application/x-test",
                      "https://localhost:#{tls}/up")
          assert_includes out, "body=#{Digest::SHA256.hexdigest(data)}:#{size}"
          assert_includes out, %(CONTENT_LENGTH="#{size}")
          assert_includes out, %(CONTENT_TYPE="application/x-test")
          out, = curl("--http2-prior-knowledge", "--data-binary", "@#{f.path}", "http://127.0.0.1:#{plain}/up")
          assert_includes out, "body=#{Digest::SHA256.hexdigest(data)}:#{size}"
          assert_includes out, %(rack.url_scheme="http")
        end
      end
    end
  end

  def test_http11_still_served_on_both_listeners
    with_h2_server(ECHO) do |tls, plain|
      out, err = curl("--http1.1", "-v", "https://localhost:#{tls}/one")
      assert_includes err, "ALPN: server accepted http/1.1"
      assert_includes out, %(SERVER_PROTOCOL="HTTP/1.1")
      assert_includes out, %(rack.hijack?=true)
      out, = curl("http://127.0.0.1:#{plain}/two")
      assert_includes out, %(SERVER_PROTOCOL="HTTP/1.1")
    end
  end

  # h2c is told by the bytes the server read, however TCP splits them: a preface whose first bytes
  # come alone (read before the rest arrives) is HTTP/2 still, not an HTTP/1.1 request line
  # answered 505 (which a client sees as an empty reply).
  def test_a_preface_that_arrives_in_pieces_is_http2
    with_h2_server(ECHO) do |_tls, plain|
      [1, 2, 5, 23].each do |n|
        got = frames(plain, "split_preface", n, "/split")["/split"]
        assert_equal "200", status_of(got), "#{n} bytes first: #{got.inspect}"
      end
    end
  end

  # h2c behind a balancer that speaks the PROXY protocol: the line, then the preface in the same
  # segment; the line's address is the streams' REMOTE_ADDR.
  def test_h2c_after_a_proxy_line
    app = ->(env) { [200, { "content-type" => "text/plain", "x-remote" => env["REMOTE_ADDR"] }, ["ok"]] }
    with_h2_server(app, binds: ["tcp://127.0.0.1:0?http2=true"], proxy_protocol: :v1) do |plain|
      got = frames(plain, "proxied", "PROXY TCP4 192.0.2.7 192.0.2.1 5000 80", "/p")["/p"]
      assert_equal "200", status_of(got), got.inspect
      assert_equal "192.0.2.7", got.first["response"].to_h["x-remote"]
    end
  end

  def test_without_http2_no_alpn_is_offered
    with_h2_server(ECHO, binds: [tls_bind]) do |port|
      out, err = curl("--http2", "-v", "https://localhost:#{port}/")
      refute_includes err, "server accepted h2"
      assert_includes out, %(SERVER_PROTOCOL="HTTP/1.1")
    end
  end

  def test_client_certificate_by_h2
    app = ->(env) { [200, { "content-type" => "text/plain" }, ["peercert=#{env['puma.peercert']&.subject}"]] }
    binds = ["#{tls_bind}&http2=true&verify_mode=peer&ca=#{CERTS.path('ca.pem')}"]
    with_h2_server(app, binds: binds) do |tls|
      out, err = curl("--http2", "-v", "--cert", CERTS.path("client.pem"), "--key", CERTS.path("client.key"),
                      "https://localhost:#{tls}/")
      assert_includes err, "ALPN: server accepted h2"
      assert_equal "peercert=/CN=Margay Test Client", out
      out, = curl("--http2", "https://localhost:#{tls}/")
      assert_equal "peercert=", out, "none without a client certificate"
    end
  end

  def test_many_streams_of_one_connection_run_on_several_threads
    lock = Mutex.new
    now = peak = 0
    app = lambda do |_env|
      lock.synchronize { peak = [peak, now += 1].max }
      sleep 0.2
      lock.synchronize { now -= 1 }
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    skip "no nghttp" unless system(CLIENT, "nghttp", "--version", out: File::NULL, err: File::NULL)
    with_h2_server(app, min_threads: 4, max_threads: 4) do |tls, plain|
      out, status = Open3.capture2e(CLIENT, "nghttp", "-n", "-s", "-m", "24", "http://127.0.0.1:#{plain}/slow")
      assert status.success?, out
      assert_equal 24, out.lines.count { |l| l.match?(/\s200\s+\d+\s+\/slow$/) }, out
      assert_operator peak, :>=, 2, "the streams of one connection overlap across threads"
      out, status = Open3.capture2e(CLIENT, "nghttp", "-n", "-s", "-m", "24", "https://localhost:#{tls}/slow",
                                    "--no-verify-peer")
      assert status.success?, out
      assert_equal 24, out.lines.count { |l| l.match?(/\s200\s+\d+\s+\/slow$/) }, out
    end
  end

  # HPACK's integer with an N-bit prefix (RFC 7541 5.1) after +first+'s flag bits.
  def hpack_int(value, bits, first = 0)
    max = (1 << bits) - 1
    return [first | value].pack("C") if value < max

    out = [first | max].pack("C")
    value -= max
    while value >= 128
      out << [(value % 128) + 128].pack("C")
      value /= 128
    end
    out << [value].pack("C")
  end

  def h2_frame(type, flags, stream, payload) = [payload.bytesize >> 8, payload.bytesize & 0xff, type, flags, stream].pack("nCCCN") + payload

  # Over TLS, +streams+ GETs whose header blocks (+pad+ bytes each, one frame) add up to more than
  # a turn's read budget, written at once: records the session read ahead and did not decrypt yet are
  # invisible to epoll, so the connection must be armed to come back for them. Every stream is
  # answered, each once. +ssl+'s statuses by stream.
  def h2_burst_over_tls(port, streams, pad)
    ssl = tls_socket(port, alpn_protocols: ["h2"])
    assert_equal "h2", ssl.alpn_protocol
    block = "\x82\x87\x84".b + "\x01".b + hpack_int(9, 7) + "localhost" +
            "\x00".b + hpack_int(5, 7) + "x-pad" + hpack_int(pad, 7) + ("p" * pad)
    out = +"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".b + h2_frame(4, 0, 0, "".b)
    streams.times { |i| out << h2_frame(1, 0x5, (2 * i) + 1, block) } # HEADERS, END_STREAM | END_HEADERS
    ssl.write(out) # the answers meanwhile are small: the socket holds them until read
    ended = {}
    buf = +"".b
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 15
    while ended.size < streams
      left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
      flunk "#{ended.size} of #{streams} streams answered" if left <= 0
      begin
        buf << ssl.read_nonblock(65_536)
      rescue IO::WaitReadable
        ssl.to_io.wait_readable([left, 0.1].max)
        next
      end
      while buf.bytesize >= 9
        len = (buf.getbyte(0) << 16) | buf.unpack1("n", offset: 1)
        break if buf.bytesize < 9 + len

        type, flags, id = buf.unpack("x3CCN")
        id &= 0x7fffffff
        ssl.write(h2_frame(4, 1, 0, "".b)) if type == 4 && flags.zero? # SETTINGS ACK
        if [0, 1].include?(type) && flags.anybits?(1)
          refute ended.key?(id), "stream #{id} ended twice"
          ended[id] = true
        end
        buf = buf.byteslice(9 + len..)
      end
    end
    ended
  ensure
    ssl&.close
  end

  def test_a_burst_of_streams_over_tls_past_a_turns_read_budget_is_answered_whole
    hello = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }
    with_h2_server(hello, max_header_size: 65_536) do |tls, _plain|
      3.times { assert_equal 100, h2_burst_over_tls(tls, 100, 12_000).size }
    end
  end

  def test_settings_advertise_the_limits
    with_h2_server(ECHO, max_header_size: 16_384) do |_tls, plain|
      settings = frames(plain, "settings")
      assert_equal 100, settings["3"], "SETTINGS_MAX_CONCURRENT_STREAMS"
      assert_equal 16_384, settings["6"], "SETTINGS_MAX_HEADER_LIST_SIZE"
    end
  end

  # A flood of +frames_args+ ends its connection with a GOAWAY (+code+ when given); another client
  # is served while it runs, and after.
  def assert_flood_closed(*frames_args, code: nil)
    with_h2_server(ECHO) do |tls, plain|
      meanwhile = Thread.new { curl("--http2", "https://localhost:#{tls}/meanwhile").first }
      result = frames(plain, *frames_args)
      code ? assert_equal(code, result["goaway"]) : refute_nil(result["goaway"])
      assert result["closed"]
      assert_includes meanwhile.value, %(SERVER_PROTOCOL="HTTP/2")
      out, = curl("--http2", "https://localhost:#{tls}/after")
      assert_includes out, %(SERVER_PROTOCOL="HTTP/2")
    end
  end

  def test_rapid_reset_is_closed_with_enhance_your_calm_and_others_are_served
    assert_flood_closed("rapid_reset", 2000, code: 11) # ENHANCE_YOUR_CALM
  end

  def test_made_you_reset_is_closed_with_enhance_your_calm_and_others_are_served
    assert_flood_closed("made_you_reset", 1000, code: 11) # streams the server resets count as well
  end

  def test_a_header_list_over_max_header_size_is_answered_431_and_the_connection_goes_on
    with_h2_server(ECHO, max_header_size: 8192) do |_tls, plain|
      result = frames(plain, "big_headers", 20_000)
      assert_equal "431", result["big"]
      assert_equal "200", result["small"]
      assert_nil result["goaway"]
    end
  end

  def test_continuation_flood_closes_the_connection
    assert_flood_closed("continuation", 64) # the code differs: nghttp2 may count them first
  end

  def test_ping_flood_is_closed_with_enhance_your_calm_and_others_are_served
    assert_flood_closed("ping_flood", 20_000, code: 11) # ACKs the client does not read
  end

  def test_settings_flood_is_closed_with_enhance_your_calm_and_others_are_served
    assert_flood_closed("settings_flood", 20_000, code: 11)
  end

  def test_a_settings_frame_of_too_many_entries_is_closed_with_enhance_your_calm
    assert_flood_closed("settings_entries", 64, code: 11)
  end

  def test_empty_data_frame_flood_is_closed_with_enhance_your_calm_and_others_are_served
    assert_flood_closed("empty_data", 10_000, code: 11) # CVE-2019-9518
  end

  BIG = ("x" * (10 * 1024 * 1024)).freeze

  def rss_kib = File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i

  # CVE-2019-9517 (internal data buffering) and -9511 (data dribble): a client that grants no
  # window (or opens it a byte at a time, PINGing meanwhile) holds at most response_buffer_limit of
  # its responses' bytes in memory (larger bodies wait in tempfiles), and write_timeout closes it;
  # others are served meanwhile. Returns the client's JSON.
  def assert_window_starver_closed(*how)
    skip_without_python_h2
    app = ->(env) { [200, { "content-type" => "text/plain" }, [env["PATH_INFO"] == "/big" ? BIG : "small"]] }
    with_h2_server(app, lint: false, min_threads: 8, max_threads: 8, write_timeout: 3, keepalive_timeout: 120,
                        response_buffer_limit: 1024 * 1024) do |tls, plain|
      GC.start
      before = rss_kib
      Open3.popen3(CLIENT, PYTHON, FRAMES, plain.to_s, "zero_window", "4", "/big", *how) do |_in, out, err, wait|
        assert_equal "ready\n", out.gets, err.read
        sleep 0.5 # the four answers are written as far as they can go
        grown = rss_kib - before
        assert_operator grown, :<, 20 * 1024, "4 x 10 MiB answers to a zero window: #{grown} KiB held"
        assert_equal "small", curl("--http2", "https://localhost:#{tls}/small").first, "served meanwhile"
        line = out.read.lines.last
        assert wait.value.success? && line, err.read
        result = JSON.parse(line)
        assert_equal 4, result["heads"]
        assert result["closed"], "closed after write_timeout"
        assert_operator result["seconds"], :<, 20, "write_timeout (3 s) closes it, not keepalive_timeout (120 s)"
        assert_equal "small", curl("--http2", "https://localhost:#{tls}/small").first
        return result
      end
    end
  end

  def test_a_zero_window_client_is_bounded_in_memory_and_closed_after_write_timeout
    assert_equal 0, assert_window_starver_closed["data"]
  end

  def test_a_window_dribbling_pinging_client_is_closed_after_write_timeout
    assert_operator assert_window_starver_closed("dribble")["data"], :>, 0, "it was given bytes, a few at a time"
  end

  def test_a_large_body_for_a_slow_reader_spills_to_a_tempfile_and_frees_its_thread
    skip "no nghttp" unless system(CLIENT, "nghttp", "--version", out: File::NULL, err: File::NULL)
    big = BIG[0, 1024 * 1024]
    app = ->(env) { [200, { "content-type" => "text/plain" }, [env["PATH_INFO"] == "/big" ? big : "small"]] }
    # one thread, and a write_timeout longer than curl's --max-time: a thread waiting for the
    # zero-window client (nghttp -w 0: stream windows of 0 bytes) would leave curl unanswered
    with_h2_server(app, lint: false, min_threads: 1, max_threads: 1, write_timeout: 30,
                        response_buffer_limit: 64 * 1024) do |tls, plain|
      Open3.popen2e(CLIENT, "nghttp", "-v", "-w", "0", "http://127.0.0.1:#{plain}/big") do |_in, out, wait|
        out.each_line { |line| break if line.include?(":status: 200") }
        assert_equal "small", curl("--http2", "https://localhost:#{tls}/small").first, "the only thread is free"
        full, = curl("--http2", "https://localhost:#{tls}/big")
        assert_equal big, full, "a reader that reads gets the whole file"
      ensure
        Process.kill(:TERM, wait.pid) if wait&.alive?
      end
    end
  end

  # A streamed body (each) past response_buffer_limit to a client that grants no window: the parts
  # past the connection's cap go to the stream's spill file, so the app's each ends and the only
  # thread serves curl meanwhile; once the client opens its windows it gets the whole body, the
  # bytes queued in memory before those spilled.
  def test_a_streamed_body_for_a_zero_window_reader_spills_to_a_tempfile_and_frees_its_thread
    skip_without_python_h2
    parts = (0...16).map { |i| (97 + i).chr * 65_536 } # 1 MiB, each part its own letter
    finished = Queue.new
    app = lambda do |env|
      next [200, { "content-type" => "text/plain" }, ["small"]] unless env["PATH_INFO"] == "/stream"

      [200, { "content-type" => "text/plain" }, Enumerator.new { |y| parts.each { |p| y << p }.then { finished << true } }]
    end
    # one thread, and a write_timeout longer than curl's --max-time: a thread waiting for the
    # zero-window client would leave curl unanswered
    with_h2_server(app, lint: false, min_threads: 1, max_threads: 1, write_timeout: 30,
                        response_buffer_limit: 64 * 1024) do |tls, plain|
      Open3.popen3(CLIENT, PYTHON, FRAMES, plain.to_s, "zero_window", "1", "/stream", "grant") do |input, out, err, wait|
        assert_equal "ready\n", out.gets, "the head came"
        assert_equal "small", curl("--http2", "https://localhost:#{tls}/small").first, "the only thread is free"
        assert_equal 1, finished.size, "the app's body was written to its end first"
        input.puts "grant"
        result = JSON.parse(out.read.lines.last || "{}")
        assert_equal [[parts.sum(&:bytesize), Digest::SHA256.hexdigest(parts.join)]], result["bodies"], err.read
        assert_equal 1, result["ended"]
        assert wait.value.success?
      ensure
        begin
          Process.kill(:TERM, wait.pid) if wait&.alive?
        rescue Errno::ESRCH
          nil # it ended meanwhile
        end
      end
    end
  end

  def test_graceful_stop_sends_goaway_and_answers_the_stream_in_flight
    skip "no nghttp" unless system(CLIENT, "nghttp", "--version", out: File::NULL, err: File::NULL)
    started = Queue.new
    app = lambda do |_env|
      started << true
      sleep 0.5
      [200, { "content-type" => "text/plain" }, ["late"]]
    end
    with_h2_server(app) do |_tls, plain, server|
      Open3.popen2e(CLIENT, "nghttp", "-v", "http://127.0.0.1:#{plain}/slow") do |_in, out, wait|
        started.pop
        server.stop
        log = out.read
        assert wait.value.success?, log
        goaway = log.index(/recv GOAWAY frame.*\n.*last_stream_id=(\d+), error_code=NO_ERROR/)
        assert goaway, "GOAWAY NO_ERROR: #{log}"
        status = log.index(/recv \(stream_id=#{Regexp.last_match(1)}\) :status: 200/)
        assert status, "the stream GOAWAY named is answered: #{log}"
        assert_operator goaway, :<, status, "the GOAWAY comes first, then the stream in flight is answered"
        assert_includes log, "late"
      end
    end
  end

  def test_files_streams_and_head
    file = Tempfile.create("h2-file")
    file.write("x" * 100_000)
    file.flush
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/file" then [200, { "content-type" => "text/plain" }, FileBody.new(file.path)]
      when "/stream" then [200, { "content-type" => "text/plain" }, Enumerator.new { |y| 3.times { |i| y << "part#{i}\n" } }]
      else [200, { "content-type" => "text/plain", "content-length" => "5" }, ["hello"]]
      end
    end
    with_h2_server(app) do |tls, _plain|
      out, = curl("--http2", "https://localhost:#{tls}/file")
      assert_equal 100_000, out.bytesize
      out, = curl("--http2", "https://localhost:#{tls}/stream")
      assert_equal "part0\npart1\npart2\n", out
      out, err = curl("--http2", "-I", "-v", "https://localhost:#{tls}/head")
      assert_match(/^< content-length: 5/, err)
      refute_includes out, "hello"
    end
  ensure
    file&.close
    File.unlink(file.path) if file
  end

  def test_early_hints_are_103_headers_frames_before_the_response
    app = lambda do |env|
      env["rack.early_hints"].call("link" => "</style.css>; rel=preload; as=style")
      env["rack.early_hints"].call("link" => ["</a.js>; rel=preload; as=script", "</b.js>; rel=preload; as=script"])
      [200, { "content-type" => "text/plain", "link" => "</style.css>; rel=preload; as=style" }, ["ok"]]
    end
    with_h2_server(app) do |_tls, plain|
      got = frames(plain, "frames", "/")["/"]
      assert_equal 5, got.size, got.inspect
      first, second, final = got.first(3)
      assert_equal [[":status", "103"], ["link", "</style.css>; rel=preload; as=style"]], first["informational"]
      links = ["</a.js>; rel=preload; as=script", "</b.js>; rel=preload; as=script"]
      assert_equal [[":status", "103"]] + links.map { |l| ["link", l] }, second["informational"]
      assert_equal [":status", "200"], final["response"].first
      assert_equal %w[data end], got.last(2)
    end
  end

  def test_health_check_path_is_answered_by_the_engine_on_h2
    called = Queue.new
    app = lambda do |env|
      called << env["PATH_INFO"]
      [200, { "content-type" => "text/plain" }, ["app"]]
    end
    with_h2_server(app, health_check_path: "/up") do |tls, plain, server|
      out, err = curl("--http2-prior-knowledge", "-v", "http://127.0.0.1:#{plain}/up")
      assert_equal "ready\n", out
      assert_match(%r{^< HTTP/2 200}, err)
      assert_match(/^< cache-control: no-store/, err)
      out, err = curl("--http2", "-I", "-v", "https://localhost:#{tls}/up")
      assert_match(%r{^< HTTP/2 200}, err)
      assert_match(/^< content-length: 6/, err)
      refute_includes out, "ready"
      out, = curl("--http2-prior-knowledge", "http://127.0.0.1:#{plain}/other")
      assert_equal "app", out
      assert_equal "/other", called.pop
      assert_empty called, "the probes never reached the app"
      assert_equal 1, server.stats[:requests], "nor counted in its requests"
    end
  end

  # Each call reported on @calls: [path, the env's figures]; /slow holds the only thread.
  def timed_app
    calls = @calls = Queue.new
    lambda do |env|
      calls << [env["PATH_INFO"], env.slice("margay.queue_time", "HTTP_X_REQUEST_START")]
      sleep 0.5 if env["PATH_INFO"] == "/slow"
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
  end

  def status_of(events) = events.find { |e| e.is_a?(Hash) && e["response"] }&.fetch("response").to_h[":status"]

  def test_a_stream_waiting_past_queue_timeout_is_shed_and_the_others_go_on
    with_h2_server(timed_app, min_threads: 1, max_threads: 1, queue_timeout: 0.2) do |_tls, plain, server|
      got = frames(plain, "frames", "/slow", "/queued")
      assert_equal "200", status_of(got["/slow"])
      assert_equal "503", status_of(got["/queued"])
      queued = got["/queued"].first["response"].to_h
      assert_equal "1", queued["retry-after"]
      assert_equal %w[data end], got["/queued"].last(2), "Service Unavailable, then the stream ends"
      assert_equal "/slow", @calls.pop[0]
      assert_empty @calls, "the shed stream never reached the app"
      stats = server.stats
      assert_equal 1, stats[:shed]
      assert_equal 1, stats[:requests], "the shed one never ran"
    end
  end

  def test_queue_time_header_and_histograms_count_h2_streams
    with_h2_server(timed_app, min_threads: 1, max_threads: 1, queue_time_header: true) do |_tls, plain, server|
      got = frames(plain, "frames", "/slow", "/queued")
      assert_equal %w[200 200], [status_of(got["/slow"]), status_of(got["/queued"])]
      figures = 2.times.to_h { @calls.pop }
      assert_match(/\At=\d{10}\.\d{3}\z/, figures["/queued"]["HTTP_X_REQUEST_START"])
      assert_operator figures["/queued"]["margay.queue_time"], :>, 0.3, "it waited for /slow"
      stats = server.stats
      queue = stats[:queue_time_seconds]
      assert_equal 2, queue[:count]
      assert_equal 1, queue[:buckets][0.25], "/slow waited for nothing"
      assert_operator queue[:sum], :>, 0.3
      duration = stats[:request_duration_seconds]
      assert_equal 2, duration[:count], "each stream's response"
      assert_equal 1, duration[:buckets][0.25], "/queued took no time"
      assert_equal 2, duration[:buckets][0.75], "/slow took 0.5 s"
    end
  end

  # An extended CONNECT's app (RFC 8441): a streaming body echoing what the client sends on the
  # tunnel until it ends its side; /stall waits a second before its first read. Each request's
  # method, path and rack.protocol go to +seen+, and how each tunnel's call ended; each echo to
  # +echoes+ (if given).
  def tunnel_app(seen, echoes = nil)
    lambda do |env|
      return [200, { "content-type" => "text/plain" }, ["plain"]] unless env["REQUEST_METHOD"] == "CONNECT"

      seen << [env["REQUEST_METHOD"], env["PATH_INFO"], env["rack.protocol"]]
      body = lambda do |stream|
        sleep 1 if env["PATH_INFO"] == "/stall"
        loop do
          stream.write(stream.readpartial(65_536))
          echoes&.push(true)
        end
      rescue EOFError
        seen << :eof
      rescue Margay::ClientGone => e
        seen << e.class
      end
      [200, { "rack.protocol" => env["rack.protocol"].first }, body]
    end
  end

  # A server whose h2c listener has extended_connect=true: yields its port and the server.
  def with_tunnels(app, &block)
    with_h2_server(app, binds: ["tcp://127.0.0.1:0?http2=true&extended_connect=true"], lint: false) do |plain, server|
      block.call(plain, server)
    end
  end

  # h2_frames.py's tunnel mode with +args+ against tunnel_app on with_tunnels: [its JSON, what the
  # app saw (the server stopped: every call returned)].
  def tunnel_run(*args)
    seen = Queue.new
    got = with_tunnels(tunnel_app(seen)) { |plain| frames(plain, "tunnel", *args) }
    [got, seen]
  end

  # Without extended_connect=true the setting is not sent, and nghttp2 resets a :protocol stream
  # (RFC 8441 3: PROTOCOL_ERROR) before any app sees it.
  def test_extended_connect_is_off_unless_the_bind_asks
    seen = Queue.new
    with_h2_server(tunnel_app(seen), binds: ["tcp://127.0.0.1:0?http2=true"], lint: false) do |plain|
      refute frames(plain, "settings").key?("8"), "no SETTINGS_ENABLE_CONNECT_PROTOCOL"
      got = frames(plain, "tunnel", "/chat", 0, 0)
      assert_equal 1, got["reset"], "PROTOCOL_ERROR: #{got.inspect}"
      assert_nil got["status"]
      assert_empty seen
    end
  end

  # The client's DATA reach the app while it answers: five messages each echoed before the next
  # is sent (the request never ended), a GET on the same connection meanwhile, 3 MB (three times
  # the stream's window) echoed whole, then END_STREAM ends the app's reading and the response.
  def test_extended_connect_is_a_full_duplex_tunnel
    got, seen = tunnel_run("/chat", 5, 3_000_000)
    assert_equal 1, got["enable_connect"], "SETTINGS_ENABLE_CONNECT_PROTOCOL"
    assert_equal "200", got["status"]
    assert_equal %w[msg-1 msg-2 msg-3 msg-4 msg-5], got["echoes"]
    assert_equal "200", got["get"], "the connection's other streams go on"
    assert_equal 3_000_000, got["big_sent"]
    assert got["big_whole"], "the 3 MB came back whole: #{got.inspect}"
    assert got["ended"], "the response ended when the app's call returned"
    assert_equal ["CONNECT", "/chat", ["websocket"]], seen.pop
    assert_equal :eof, Timeout.timeout(5) { seen.pop }
  end

  # The only thread in a tunnel's app: no thread is in the loop to read what the client sends on
  # it, so the app's read reads the connection itself; every message is echoed, then 3 MB whole.
  def test_a_tunnel_on_the_only_thread_reads_its_client_itself
    seen = Queue.new
    got = with_h2_server(tunnel_app(seen), binds: ["tcp://127.0.0.1:0?http2=true&extended_connect=true"], lint: false,
                                            min_threads: 1, max_threads: 1) { |plain| frames(plain, "tunnel", "/chat", 0, 3_000_000) }
    assert_equal "200", got["status"]
    assert got["big_whole"], "the 3 MB came back whole: #{got.inspect}"
    assert got["ended"], "the response ended when the app's call returned"
    assert_equal ["CONNECT", "/chat", ["websocket"]], seen.pop
    assert_equal :eof, Timeout.timeout(5) { seen.pop }
  end

  # The stream's window bounds what waits for an app that does not read: the client can send
  # SETTINGS_INITIAL_WINDOW_SIZE (1 MiB) and no more until the app reads; then the rest flows.
  def test_a_tunnel_nobody_reads_holds_the_stream_window_and_no_more
    got, = tunnel_run("/stall", 0, 2_000_000)
    assert_equal 1 << 20, got["held"], got.inspect
    assert got["big_whole"], got.inspect
    assert got["ended"]
  end

  # A client that resets its tunnel: the app's waiting read raises ClientGone, its thread is free.
  def test_a_reset_tunnel_raises_client_gone_in_the_apps_read
    seen = Queue.new
    with_tunnels(tunnel_app(seen)) do |plain|
      got = frames(plain, "tunnel", "/chat", 1, 0, "reset")
      assert_equal ["msg-1"], got["echoes"]
      seen.pop
      assert_equal Margay::ClientGone, Timeout.timeout(5) { seen.pop }
      out, = curl("--http2-prior-knowledge", "http://127.0.0.1:#{plain}/")
      assert_equal "plain", out
    end
  end

  # A graceful stop while a tunnel is open: the app's read returns end of stream (as an upgraded
  # HTTP/1.1 connection's does), its call returns, the connection closes after its GOAWAY.
  # (python3-h2 drops the frames that follow a GOAWAY: the stream's end is not looked at here.)
  def test_a_graceful_stop_ends_a_tunnels_reading
    seen = Queue.new
    echoes = Queue.new
    with_tunnels(tunnel_app(seen, echoes)) do |plain, server|
      client = Thread.new { frames(plain, "tunnel", "/chat", 1, 0, "hold") }
      Timeout.timeout(10) { echoes.pop }
      server.stop
      got = client.value
      assert_equal ["msg-1"], got["echoes"]
      assert got["closed"], got.inspect
      seen.pop
      assert_equal :eof, seen.pop
    end
  end

  # A body answering to_path (Rack::Files does the same).
  class FileBody
    def initialize(path) = @path = path
    def to_path = @path
    def each = yield(File.binread(@path))
  end

  def test_fiber_mode_refuses_http2_binds
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0?http2=true"], silent: true, fiber_scheduler: true)
    server = Margay::Server.new(ECHO, config, log: Margay::Log.new(out: StringIO.new, err: StringIO.new))
    server.bind
    error = assert_raises(Margay::ConfigError) { server.run }
    assert_includes error.message, "http2=true is served by thread mode only"
  ensure
    server&.stop
  end
end
