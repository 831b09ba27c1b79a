# frozen_string_literal: true

require "test_helper"
require "digest/sha2" # at load: threads autoloading Digest::SHA256 at once race
require "net/http"
require "openssl"
require "margay/native"
require "support/tls_certs"

# TLS done by the engine (ext/margay/core/tls.c) on an ssl:// listener, over real sockets:
# Net::HTTP, raw OpenSSL sockets and the openssl CLI as clients, certificates from a test CA.
class TLSTest < Minitest::Test
  skip_on_jruby "no TLS in the pure-Ruby engine (ssl:// binds are refused at start)"
  include Margay::TestHelper
  include Margay::TLSClient

  CERTS = Margay::TLSCerts

  ECHO_ENV = lambda do |env|
    keys = %w[rack.url_scheme HTTPS SERVER_PORT rack.hijack?]
    text = keys.map { |k| "#{k}=#{env[k].inspect}" }.join("\n")
    text += "\nhijack=#{env.key?('rack.hijack')}\npeercert=#{env['puma.peercert']&.subject}"
    [200, { "content-type" => "text/plain" }, [text]]
  end

  def setup
    skip "built without OpenSSL" unless Margay::Native::TLS
    skip "no openssl command" unless CERTS.cli?
  end

  # A server on an ssl:// bind at port 0 with the RSA certificate (+query+: more options).
  def with_tls_server(app, query: "", lint: true, **settings)
    log_io = StringIO.new
    bind = "ssl://127.0.0.1:0?cert=#{CERTS.path('rsa.pem')}&key=#{CERTS.path('rsa.key')}#{query}"
    config = Margay::Configuration.new(binds: [bind], silent: true, event_backend: BACKEND, **settings)
    server = Margay::Server.new(lint ? Rack::Lint.new(app) : app, config, log: Margay::Log.new(out: log_io, err: log_io))
    server.bind
    thread = Thread.new { server.run }
    yield server.addresses.first[/:(\d+)\z/, 1].to_i, server
  rescue Minitest::Assertion
    warn "--- server log ---\n#{log_io.string}" unless log_io.string.empty?
    raise
  ensure
    server&.stop
    thread&.join(10)
  end

  def http(port, cert: nil, key: nil)
    h = Net::HTTP.new("127.0.0.1", port)
    h.use_ssl = true
    h.ca_file = CERTS.path("ca.pem")
    h.verify_mode = OpenSSL::SSL::VERIFY_PEER
    h.cert = OpenSSL::X509::Certificate.new(File.read(cert)) if cert
    h.key = OpenSSL::PKey.read(File.read(key)) if key
    h.read_timeout = 10
    h
  end

  def test_https_env
    with_tls_server(ECHO_ENV) do |port|
      body = http(port).start { |h| h.get("/").body }
      assert_includes body, %(rack.url_scheme="https")
      assert_includes body, %(HTTPS="https")
      assert_includes body, %(SERVER_PORT="#{port}")
      assert_includes body, "rack.hijack?=true"
      assert_includes body, "hijack=true"
      assert body.end_with?("peercert="), "no client certificate was asked for"
    end
  end

  def test_host_without_port_means_443
    with_tls_server(ECHO_ENV) do |port|
      ssl = tls_socket(port)
      ssl.write("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
      assert_includes read_tls_response(ssl)[2], %(SERVER_PORT="443")
    ensure
      ssl&.close
    end
  end

  def test_keep_alive_and_pipelining_on_one_session
    with_tls_server(->(env) { [200, { "content-type" => "text/plain" }, [env["PATH_INFO"]]] }) do |port|
      ssl = tls_socket(port)
      ssl.write("GET /one HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal ["HTTP/1.1 200 OK", "/one"], read_tls_response(ssl).values_at(0, 2)
      ssl.write("GET /two HTTP/1.1\r\nHost: x\r\n\r\nGET /three HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "/two", read_tls_response(ssl)[2]
      assert_equal "/three", read_tls_response(ssl)[2]
    ensure
      ssl&.close
    end
  end

  def test_large_upload
    digest = ->(env) { [200, { "content-type" => "text/plain" }, [Digest::SHA256.hexdigest(env["rack.input"].read)]] }
    body = Random.new(1).bytes(5 * 1024 * 1024 + 17)
    with_tls_server(digest) do |port|
      res = http(port).start { |h| h.post("/", body, "content-type" => "application/octet-stream") }
      assert_equal Digest::SHA256.hexdigest(body), res.body
    end
  end

  def test_large_response_file_body_and_stream
    big = Random.new(2).bytes(8 * 1024 * 1024 + 3)
    file = Tempfile.new("margay-tls")
    file.binmode
    file.write(Random.new(3).bytes(3 * 1024 * 1024 + 5))
    file.flush
    file_body = Struct.new(:to_path) { def each = raise("served by path") }
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/big" then [200, { "content-type" => "application/octet-stream" }, [big]]
      when "/file" then [200, { "content-type" => "application/octet-stream", "content-length" => File.size(file.path).to_s }, file_body.new(file.path)]
      else [200, { "content-type" => "text/plain" }, Enumerator.new { |y| 300.times { |i| y << ("#{i}," * 100) } }]
      end
    end
    with_tls_server(app, lint: false) do |port|
      http(port).start do |h|
        assert_equal Digest::SHA256.hexdigest(big), Digest::SHA256.hexdigest(h.get("/big").body)
        assert_equal Digest::SHA256.file(file.path).hexdigest, Digest::SHA256.hexdigest(h.get("/file").body)
        streamed = h.get("/stream")
        assert_equal "chunked", streamed["transfer-encoding"]
        assert_equal Array.new(300) { |i| "#{i}," * 100 }.join, streamed.body
      end
    end
  ensure
    file&.close!
  end

  # Fiber mode's threads look for work with the GVL too (a wait of 0): a handshake is still left
  # to a wait without it.
  def test_fiber_mode
    skip "fiber mode needs epoll" unless BACKEND == :auto || BACKEND == :epoll
    with_tls_server(->(env) { [200, { "content-type" => "text/plain" }, [env["rack.url_scheme"]]] }, fiber_scheduler: true) do |port|
      3.times { assert_equal "https", http(port).start { |h| h.get("/").body } }
      ssl = tls_socket(port)
      ssl.write("GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n")
      2.times { assert_equal "https", read_tls_response(ssl)[2] }
    ensure
      ssl&.close
    end
  end

  # Handshakes and requests from many clients at once, over a few app threads: every thread
  # path (the fast path with the GVL leaves handshakes to the waits without it) serves them.
  def test_many_clients_at_once
    app = ->(env) { [200, { "content-type" => "text/plain" }, [env["PATH_INFO"]]] }
    with_tls_server(app, max_threads: 3) do |port|
      results = Array.new(24) do |i|
        Thread.new { http(port).start { |h| Array.new(5) { |k| h.get("/#{i}/#{k}").body } } }
      end.map(&:value)
      assert_equal Array.new(24) { |i| Array.new(5) { |k| "/#{i}/#{k}" } }, results
    end
  end

  def test_plain_http_to_the_tls_port_gets_400
    with_tls_server(HELLO) do |port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      reply = read_all(sock)
      assert_match(%r{\AHTTP/1.1 400 Bad Request\r\n}, reply)
      assert_includes reply, "connection: close\r\n"
      assert reply.end_with?("\r\n\r\nThis port speaks HTTPS: send the request over TLS.\n"), reply
      assert_equal reply.split("\r\n\r\n", 2)[1].bytesize, reply[/content-length: (\d+)/, 1].to_i
    ensure
      sock&.close
    end
  end

  def test_a_client_stalling_mid_handshake_is_closed_after_header_timeout
    with_tls_server(HELLO, header_timeout: 1) do |port|
      stalled = TCPSocket.new("127.0.0.1", port)
      stalled.write("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".b) # a ClientHello's first bytes, then nothing
      started = Margay::Clock.now
      assert_equal "200", http(port).start { |h| h.get("/").code }, "another client is served meanwhile"
      assert_equal "", read_all(stalled, timeout: 6), "closed without an answer"
      assert_operator Margay::Clock.now - started, :>, 0.5, "by the timeout"
      assert_operator Margay::Clock.now - started, :<, 4
    ensure
      stalled&.close
    end
  end

  def s_client(port, *args)
    cmd = ["openssl", "s_client", "-connect", "127.0.0.1:#{port}", "-CAfile", CERTS.path("ca.pem"), "-servername", "localhost",
           "-ign_eof", *args]
    out, = Open3.capture2e(*cmd, stdin_data: "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    out
  end

  def test_protocol_versions_with_openssl_s_client
    with_tls_server(HELLO) do |port|
      assert_match(/Protocol\s*:\s*TLSv1\.2/, s_client(port, "-tls1_2"))
      assert_includes s_client(port, "-tls1_2"), "HTTP/1.1 200 OK"
      out = s_client(port, "-tls1_3")
      assert_includes out, "TLSv1.3"
      assert_includes out, "HTTP/1.1 200 OK"
      assert_includes out, "Verify return code: 0 (ok)"
      refute_includes s_client(port, "-tls1_1"), "HTTP/1.1 200 OK", "TLS 1.1 is refused"
      alpn = s_client(port, "-alpn", "h2,http/1.1")
      assert_includes alpn, "No ALPN negotiated"
      assert_includes alpn, "HTTP/1.1 200 OK"
    end
  end

  def test_tls12_suites_are_ecdhe_with_aead
    with_tls_server(HELLO) do |port|
      refute_includes s_client(port, "-tls1_2", "-cipher", "AES128-SHA"), "HTTP/1.1 200 OK", "RSA key exchange, CBC"
      assert_match(/Cipher\s*:\s*ECDHE-RSA-AES(128|256)-GCM/, s_client(port, "-tls1_2"))
    end
  end

  # The client offers each weak thing alone (OpenSSL's security level 0 lets it) and the server
  # answers with an alert: 70 (protocol version) for TLS 1.0/1.1, 40 (handshake failure) for the
  # TLS 1.2 suites without forward secrecy or AEAD. An alert received shows the offer was made.
  def test_no_weak_protocol_or_cipher_is_accepted
    with_tls_server(HELLO) do |port|
      %w[-tls1 -tls1_1].each do |version|
        assert_match(/SSL alert number 70/, s_client(port, version, "-cipher", "DEFAULT@SECLEVEL=0"), version)
      end
      # (3DES, RC4, NULL and export suites are not in the client's OpenSSL 3 to offer:
      # test/slow/tls_test.rb's testssl.sh run offers them with its own sockets.)
      %w[ECDHE-RSA-AES128-SHA ECDHE-RSA-AES256-SHA384 AES256-GCM-SHA384 AES128-SHA DHE-RSA-AES128-GCM-SHA256
         ADH-AES128-GCM-SHA256].each do |cipher|
        assert_match(/SSL alert number 40/, s_client(port, "-tls1_2", "-cipher", "#{cipher}:@SECLEVEL=0"), cipher)
      end
    end
  end

  def test_ecdsa_certificate
    query_free = "ssl://127.0.0.1:0?cert=#{CERTS.path('ecdsa.pem')}&key=#{CERTS.path('ecdsa.key')}"
    config = Margay::Configuration.new(binds: [query_free], silent: true, event_backend: BACKEND)
    server = Margay::Server.new(HELLO, config, log: Margay::Log.new(out: StringIO.new, err: StringIO.new))
    server.bind
    thread = Thread.new { server.run }
    port = server.addresses.first[/:(\d+)\z/, 1].to_i
    assert_match(/Cipher\s*:\s*ECDHE-ECDSA-/, s_client(port, "-tls1_2"))
    assert_equal "200", http(port).start { |h| h.get("/").code }
  ensure
    server&.stop
    thread&.join(10)
  end

  def test_client_certificates
    ca = "&verify_mode=force_peer&ca=#{CERTS.path('ca.pem')}"
    with_tls_server(ECHO_ENV, query: ca) do |port|
      body = http(port, cert: CERTS.path("client.pem"), key: CERTS.path("client.key")).start { |h| h.get("/").body }
      assert_includes body, "peercert=/CN=Margay Test Client"
      assert_raises(OpenSSL::SSL::SSLError, EOFError, Errno::ECONNRESET) { http(port).start { |h| h.get("/") } }
    end
    with_tls_server(ECHO_ENV, query: "&verify_mode=peer&ca=#{CERTS.path('ca.pem')}") do |port|
      assert http(port).start { |h| h.get("/").body }.end_with?("peercert="), "peer: a client without one is served"
    end
  end

  def test_client_certificate_is_an_openssl_certificate
    seen = Queue.new
    app = ->(env) { seen << env["puma.peercert"] and [200, {}, []] }
    with_tls_server(app, query: "&verify_mode=peer&ca=#{CERTS.path('ca.pem')}") do |port|
      http(port, cert: CERTS.path("client.pem"), key: CERTS.path("client.key")).start { |h| h.get("/") }
      cert = pop_within(seen)
      assert_instance_of OpenSSL::X509::Certificate, cert
      assert_equal OpenSSL::X509::Certificate.new(File.read(CERTS.path("client.pem"))).to_der, cert.to_der
    end
  end

  # Keep-alive balancing passes sockets between workers; a TLS session cannot follow.
  def test_tls_connections_are_never_detached_for_another_worker
    with_tls_server(HELLO) do |port, server|
      kept = tls_socket(port)
      kept.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "HTTP/1.1 200 OK", read_tls_response(kept)[0]
      fresh = TCPSocket.new("127.0.0.1", port) # accepted, nothing sent yet
      Timeout.timeout(5) { sleep 0.01 until server.stats[:connections] == 2 }
      assert_equal [], server.engine.detach_idle(10, false)
      kept.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "HTTP/1.1 200 OK", read_tls_response(kept)[0], "still served here"
    ensure
      kept&.close
      fresh&.close
    end
  end

  # Everything the client reads until the server's close_notify (or the socket's end).
  def read_tls_to_end(ssl)
    data = +""
    loop { data << ssl.readpartial(65_536) }
  rescue EOFError, Errno::ECONNRESET
    data
  end

  # rack.hijack on a TLS connection hands over the session: the app reads and writes plain text
  # (bytes the client sent right after the request first), and its close sends close_notify.
  def test_full_hijack_reads_and_writes_plain_text
    app = lambda do |env|
      io = env["rack.hijack"].call
      io.write("HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
      2.times { io.write("echo:#{io.readpartial(100)};") }
      io.close
      [200, {}, []]
    end
    with_tls_server(app, lint: false) do |port|
      ssl = tls_socket(port)
      ssl.write("GET / HTTP/1.1\r\nHost: x\r\n\r\nping")
      assert_equal "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\necho:ping;", ssl.readpartial(100) + ssl.readpartial(100)
      ssl.write("pong")
      assert_equal "echo:pong;", read_tls_to_end(ssl)
    ensure
      ssl&.close
    end
  end

  def test_partial_hijack
    app = ->(_env) { [200, { "rack.hijack" => ->(io) { io.write("from the app") && io.close } }, []] }
    with_tls_server(app, lint: false) do |port|
      ssl = tls_socket(port)
      ssl.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      reply = read_tls_to_end(ssl)
      assert_match(%r{\AHTTP/1.1 200 OK\r\n}, reply)
      assert reply.end_with?("\r\n\r\nfrom the app"), reply
    ensure
      ssl&.close
    end
  end

  # A 101 with a callable body (WebSocket's way in Rack 3) over TLS.
  def test_upgrade_over_tls
    app = lambda do |env|
      return [426, {}, []] unless env["rack.protocol"]

      [101, { "upgrade" => "echo", "connection" => "upgrade" }, ->(stream) { stream.write(stream.readpartial(10).upcase) }]
    end
    with_tls_server(app, lint: false) do |port|
      ssl = tls_socket(port)
      ssl.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
      head = +""
      head << ssl.readpartial(1) until head.end_with?("\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 101 }, head)
      ssl.write("abc")
      assert_equal "ABC", read_tls_to_end(ssl)
    ensure
      ssl&.close
    end
  end

  # websocket-driver's client over TLS (wss://) against a Rack 3 streaming body: the app's
  # stream reads and writes plain text over the connection's session.
  def test_websocket_over_tls
    require "support/websocket_client"
    require "support/websocket_echo"
    with_tls_server(Margay::WebSocketEcho, lint: false) do |port|
      ctx = OpenSSL::SSL::SSLContext.new
      ctx.set_params(ca_file: CERTS.path("ca.pem"), verify_mode: OpenSSL::SSL::VERIFY_PEER)
      clients = Array.new(2) { Margay::WebSocketClient.new(port, "/", timeout: 10, tls: ctx) }
      clients.each { |c| assert c.open?, "the wss:// handshake" }
      clients.each_with_index { |c, i| c.text("message #{i}" * (i * 5000 + 1)) }
      clients.each_with_index { |c, i| assert_equal "echo: #{"message #{i}" * (i * 5000 + 1)}", c.receive }
      clients.first.text("bye")
      assert_equal "echo: bye", clients.first.receive
      assert_equal 1000, clients.first.closed&.code
    ensure
      clients&.each(&:close)
    end
  end

  def test_encrypted_key_with_password_command
    query = "&key_password_command=#{URI.encode_www_form_component("echo #{CERTS::PASSWORD}")}"
    log_io = StringIO.new
    bind = "ssl://127.0.0.1:0?cert=#{CERTS.path('rsa.pem')}&key=#{CERTS.path('rsa-encrypted.key')}#{query}"
    config = Margay::Configuration.new(binds: [bind], silent: true, event_backend: BACKEND)
    server = Margay::Server.new(HELLO, config, log: Margay::Log.new(out: log_io, err: log_io))
    server.bind
    thread = Thread.new { server.run }
    assert_equal "200", http(server.addresses.first[/:(\d+)\z/, 1].to_i).start { |h| h.get("/").code }
  ensure
    server&.stop
    thread&.join(10)
  end

  def test_session_resumption_with_tickets
    with_tls_server(HELLO) do |port|
      first = tls_socket(port, max_version: OpenSSL::SSL::TLS1_2_VERSION)
      session = first.session
      first.close
      ctx = OpenSSL::SSL::SSLContext.new
      ctx.set_params(ca_file: CERTS.path("ca.pem"), max_version: OpenSSL::SSL::TLS1_2_VERSION)
      again = OpenSSL::SSL::SSLSocket.new(TCPSocket.new("127.0.0.1", port), ctx)
      again.session = session
      again.connect
      assert again.session_reused?, "a ticket from the same context resumes"
      again.close
    end
  end
end
