# frozen_string_literal: true

require "test_helper"
require "fileutils"
require "openssl"
require "margay/native"
require "margay/process/tls"
require "support/tls_certs"

# Which certificate a TLS listener presents, over real sockets: several on one listener chosen
# by SNI (openssl s_client -servername, curl --resolve), and certificates read again while
# connections stay open (Runner#reload_tls, what the ALRM signal and a phased restart call).
class TLSCertificatesTest < Minitest::Test
  skip_on_jruby "no TLS in the pure-Ruby engine (ssl:// binds are refused at start)"
  include Margay::TestHelper
  include Margay::TLSClient

  CERTS = Margay::TLSCerts
  HELLO = ->(_env) { [200, { "content-type" => "text/plain" }, ["hello"]] }

  def setup
    skip "built without OpenSSL" unless Margay::Native::TLS
    skip "no openssl command" unless CERTS.cli?
  end

  def with_tls_server(bind, app = HELLO)
    @log_io = StringIO.new
    config = Margay::Configuration.new(binds: [bind], silent: true, event_backend: BACKEND)
    server = Margay::Server.new(app, config, log: Margay::Log.new(out: @log_io, err: @log_io))
    server.bind
    thread = Thread.new { server.run }
    yield server.addresses.first[/:(\d+)\z/, 1].to_i, server
  rescue Minitest::Assertion
    warn "--- server log ---\n#{@log_io.string}" unless @log_io.string.empty?
    raise
  ensure
    server&.stop
    thread&.join(10)
  end

  def sni_bind
    TLS_BIND.call(CERTS.path("rsa.pem"), CERTS.path("rsa.key")) +
      "&sni[api.example.test][cert]=#{CERTS.path('api.pem')}&sni[api.example.test][key]=#{CERTS.path('api.key')}" \
      "&sni[*.example.org][cert]=#{CERTS.path('wild.pem')}&sni[*.example.org][key]=#{CERTS.path('wild.key')}"
  end

  TLS_BIND = ->(cert, key) { "ssl://127.0.0.1:0?cert=#{cert}&key=#{key}" }

  # openssl s_client's output for one request (+name+: the SNI name, nil: none sent).
  def s_client(port, name, *args)
    sni = name ? ["-servername", name] : ["-noservername"]
    cmd = ["openssl", "s_client", "-connect", "127.0.0.1:#{port}", "-CAfile", CERTS.path("ca.pem"), *sni, "-ign_eof", *args]
    out, = Open3.capture2e(*cmd, stdin_data: "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    out
  end

  def subject(out) = out[/^subject=(.*)$/, 1].to_s.delete(" ")

  def test_sni_picks_the_certificate_by_name_and_the_default_answers_the_rest
    with_tls_server(sni_bind) do |port|
      api = s_client(port, "api.example.test", "-tls1_3")
      assert_equal "CN=api.example.test", subject(api)
      assert_includes api, "HTTP/1.1 200 OK"
      assert_equal "CN=api.example.test", subject(s_client(port, "API.Example.Test")), "names are case-insensitive"
      wild = s_client(port, "www.example.org", "-tls1_2")
      assert_equal "CN=*.example.org", subject(wild)
      assert_match(/Cipher\s*:\s*ECDHE-ECDSA-/, wild, "the ECDSA certificate of the name, not the default RSA one")
      assert_includes wild, "HTTP/1.1 200 OK"
      assert_equal "CN=localhost", subject(s_client(port, "a.b.example.org")), "a wildcard covers one label"
      assert_equal "CN=localhost", subject(s_client(port, "example.org"))
      assert_equal "CN=localhost", subject(s_client(port, "unknown.test"))
      none = s_client(port, nil)
      assert_equal "CN=localhost", subject(none)
      assert_includes none, "HTTP/1.1 200 OK"
    end
  end

  def test_sni_with_curl_verifying_the_host_name
    plain = { "LD_PRELOAD" => nil } # not ASan's (test:asan): curl hangs under it
    skip "no curl" unless system(plain, "curl", "--version", out: File::NULL, err: File::NULL)
    with_tls_server(sni_bind) do |port|
      %w[api.example.test www.example.org localhost].each do |host|
        out, status = Open3.capture2e(plain, "curl", "-sS", "--max-time", "10", "--cacert", CERTS.path("ca.pem"),
                                      "--resolve", "#{host}:#{port}:127.0.0.1", "https://#{host}:#{port}/")
        assert status.success?, "#{host}: #{out}"
        assert_equal "hello", out
      end
    end
  end

  # On an http2 listener each name's certificate comes with ALPN h2 as the default's does.
  def test_sni_on_an_http2_listener
    skip "built without libnghttp2" unless Margay::Native::H2
    plain = { "LD_PRELOAD" => nil }
    skip "no curl" unless system(plain, "curl", "--version", out: File::NULL, err: File::NULL)
    with_tls_server("#{sni_bind}&http2=true") do |port|
      { "api.example.test" => "CN=api.example.test", "www.example.org" => "CN=*.example.org", "localhost" => "CN=localhost" }
        .each do |host, cn|
          out, err, = Open3.capture3(plain, "curl", "-sS", "-v", "--http2", "--max-time", "10", "--cacert", CERTS.path("ca.pem"),
                                     "--resolve", "#{host}:#{port}:127.0.0.1", "https://#{host}:#{port}/")
          assert_includes err, "ALPN: server accepted h2", host
          assert_match(/subject: #{Regexp.escape(cn)}/, err, host)
          assert_equal "hello", out
        end
    end
  end

  def test_sni_options_are_checked_at_start
    {
      "#{sni_bind}&sni[bad_name][cert]=x&sni[bad_name][key]=y" => /not a host name for sni/,
      "#{TLS_BIND.call('/c', '/k')}&sni[a.test][cert]=/c" => /sni\[a\.test\] needs both cert and key/,
      "#{TLS_BIND.call('/c', '/k')}&sni[a.test][cert]=/c&sni[A.test][cert]=/d" => /given twice/
    }.each do |url, message|
      error = assert_raises(Margay::ConfigError) { Margay::TLS.parse_query(url, url.split("?", 2)[1]) }
      assert_match message, error.message
    end
    wrong_key = "#{TLS_BIND.call(CERTS.path('rsa.pem'), CERTS.path('rsa.key'))}" \
                "&sni[api.example.test][cert]=#{CERTS.path('api.pem')}&sni[api.example.test][key]=#{CERTS.path('rsa.key')}"
    parsed = Margay::TLS.parse_query(wrong_key, wrong_key.split("?", 2)[1])
    error = assert_raises(Margay::ConfigError) { Margay::TLS.context(wrong_key, parsed, []) }
    assert_match(/key does not match the certificate for api\.example\.test/, error.message)
  end

  def test_ssl_bind_sni_hash_with_files_and_pem_text
    source = <<~RUBY
      ssl_bind "127.0.0.1", 0, cert: #{CERTS.path('rsa.pem').inspect}, key: #{CERTS.path('rsa.key').inspect},
               sni: { "api.example.test" => { cert: #{CERTS.path('api.pem').inspect}, key: #{CERTS.path('api.key').inspect} },
                      "*.example.org" => { cert_pem: File.read(#{CERTS.path('wild.pem').inspect}),
                                           key_pem: File.read(#{CERTS.path('wild.key').inspect}) } }
    RUBY
    settings = Margay::Configuration::DSL.evaluate(source, "config/puma.rb")
    bind = settings[:binds].last
    refute_includes bind, "BEGIN", "PEM text stays out of the URL"
    assert_includes bind, "&sni[api.example.test][cert]="
    log_io = StringIO.new
    server_config = Margay::Configuration.new(binds: [bind], ssl_pems: settings[:ssl_pems], silent: true, event_backend: BACKEND)
    server = Margay::Server.new(HELLO, server_config, log: Margay::Log.new(out: log_io, err: log_io))
    server.bind
    thread = Thread.new { server.run }
    port = server.addresses.first[/:(\d+)\z/, 1].to_i
    assert_equal "CN=api.example.test", subject(s_client(port, "api.example.test"))
    assert_equal "CN=*.example.org", subject(s_client(port, "x.example.org"))
    assert_equal "CN=localhost", subject(s_client(port, "localhost"))
  ensure
    server&.stop
    thread&.join(10)
  end


  def serial(name) = OpenSSL::X509::Certificate.new(File.read(CERTS.path(name))).serial

  # Files the test rewrites: +name+'s certificate and key copied to a temp dir.
  def copies(dir, name)
    %w[pem key].map { |ext| File.join(dir, "server.#{ext}").tap { |to| FileUtils.cp(CERTS.path("#{name}.#{ext}"), to) } }
  end

  def test_reload_new_handshakes_see_the_new_certificate_open_connections_keep_going
    Dir.mktmpdir do |dir|
      cert, key = copies(dir, "rsa")
      with_tls_server(TLS_BIND.call(cert, key)) do |port, server|
        kept = tls_socket(port)
        assert_equal ["HTTP/1.1 200 OK", "hello"], tls_get(kept).values_at(0, 2)
        assert_equal serial("rsa.pem"), kept.peer_cert.serial
        copies(dir, "ecdsa")
        assert_equal 1, server.reload_tls
        assert_match(/TLS certificates of ssl:\/\/127\.0\.0\.1:\d+ reloaded/, @log_io.string)
        assert_equal ["HTTP/1.1 200 OK", "hello"], tls_get(kept).values_at(0, 2),
                     "the connection made before the reload serves on"
        fresh = tls_socket(port)
        assert_equal serial("ecdsa.pem"), fresh.peer_cert.serial
        assert_equal ["HTTP/1.1 200 OK", "hello"], tls_get(fresh).values_at(0, 2)
        assert_equal ["HTTP/1.1 200 OK", "hello"], tls_get(kept).values_at(0, 2)
      ensure
        kept&.close
        fresh&.close
      end
    end
  end

  def test_a_bad_new_certificate_keeps_the_old_one_and_logs_one_line
    Dir.mktmpdir do |dir|
      cert, key = copies(dir, "rsa")
      with_tls_server(TLS_BIND.call(cert, key)) do |port, server|
        FileUtils.cp(CERTS.path("ecdsa.key"), key) # a key for another certificate
        assert_equal 0, server.reload_tls
        FileUtils.rm_f(cert) # then no certificate at all
        assert_equal 0, server.reload_tls
        lines = @log_io.string.lines.grep(/not reloaded/)
        assert_equal 2, lines.size, @log_io.string
        assert_match(/the old ones stay in use\): the key does not match the certificate/, lines[0])
        assert_match(/cannot use the certificate #{Regexp.escape(cert)}/, lines[1])
        ssl = tls_socket(port)
        assert_equal serial("rsa.pem"), ssl.peer_cert.serial
        assert_equal ["HTTP/1.1 200 OK", "hello"], tls_get(ssl).values_at(0, 2)
      ensure
        ssl&.close
      end
    end
  end

  def test_reload_reads_the_sni_certificates_again
    Dir.mktmpdir do |dir|
      cert, key = copies(dir, "api")
      bind = "#{TLS_BIND.call(CERTS.path('rsa.pem'), CERTS.path('rsa.key'))}&sni[api.example.test][cert]=#{cert}" \
             "&sni[api.example.test][key]=#{key}"
      with_tls_server(bind) do |port, server|
        assert_equal "CN=api.example.test", subject(s_client(port, "api.example.test"))
        copies(dir, "wild") # the *.example.org certificate now answers api.example.test
        server.reload_tls
        assert_equal "CN=*.example.org", subject(s_client(port, "api.example.test"))
        assert_equal "CN=localhost", subject(s_client(port, "other.test"))
      end
    end
  end
end
