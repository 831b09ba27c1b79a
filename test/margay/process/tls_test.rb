# frozen_string_literal: true

require "test_helper"
require "margay/native"
require "margay/process/tls"

# Margay::TLS: an ssl:// bind's options as Puma reads them, and the context made of them.
class TLSOptionsTest < Minitest::Test
  TLS = Margay::TLS

  def test_query_as_puma_reads_it
    options = TLS.parse_query("u", "cert=%2Fa%20b%2Fc.pem;key=/k.pem&&verify_mode=force_peer&ca=/ca.pem&" \
                                   "verification_flags=PARTIAL_CHAIN,X509_STRICT&reuse=100,60&no_tlsv1_1=true&backlog=64")
    assert_equal({ cert: "/a b/c.pem", key: "/k.pem", verify_mode: "force_peer", ca: "/ca.pem",
                   verification_flags: 0x80000 | 0x20, reuse: "100,60", no_tlsv1_1: true, backlog: 64 }, options)
  end

  def test_reuse_values
    %w[off dflt 100 100,60 ,60].each do |value|
      assert_equal value, TLS.parse_query("u", "cert=c&key=k&reuse=#{value}")[:reuse]
    end
    assert_raises(Margay::ConfigError) { TLS.parse_query("u", "cert=c&key=k&reuse=lots") }
  end

  def test_bind_url_for_ssl_bind_options
    assert_equal "ssl://[::]:9443?cert=%2Fc+d.pem&key=%2Fk.pem&key_password_command=%2Fbin%2Fecho+x&reuse=dflt" \
                 "&verify_mode=force_peer&no_tlsv1_1=true&ca=%2Fca.pem&verification_flags=PARTIAL_CHAIN&backlog=32" \
                 "&low_latency=false",
                 TLS.bind_url("[::]", 9443, cert: "/c d.pem", key: "/k.pem", key_password_command: "/bin/echo x", reuse: true,
                                            verify_mode: "force_peer", no_tlsv1: true, no_tlsv1_1: true, ca: "/ca.pem",
                                            verification_flags: ["PARTIAL_CHAIN"], backlog: 32, low_latency: false)
    assert_equal "ssl://h:1?cert=c&key=k&ssl_cipher_filter=ECDHE%2BAESGCM&reuse=5,9&verify_mode=none",
                 TLS.bind_url("h", 1, cert: "c", key: "k", ssl_cipher_filter: "ECDHE+AESGCM", reuse: { size: 5, timeout: 9 })
    # http2: Margay's own option (Puma has no HTTP/2), read back by the query parser
    url = TLS.bind_url("h", 1, cert: "c", key: "k", http2: true)
    assert_equal "ssl://h:1?cert=c&key=k&verify_mode=none&http2=true", url
    assert_equal true, TLS.parse_query(url, url.split("?", 2).last)[:http2]
    url = TLS.bind_url("h", 1, cert: "c", key: "k", http2: true, extended_connect: true)
    assert_equal "ssl://h:1?cert=c&key=k&verify_mode=none&http2=true&extended_connect=true", url
    assert_equal true, TLS.parse_query(url, url.split("?", 2).last)[:extended_connect]
  end

  # sni: Margay's own (Puma has one certificate per listener): ssl_bind's hash as query pairs,
  # read back as the same hash (host names lower-cased); a bad shape is refused with one line.
  def test_sni_in_the_bind_url_and_back
    url = TLS.bind_url("h", 1, cert: "c", key: "k", sni: { "API.example.com" => { cert: "/a b.pem", key: "/a.key" },
                                                           "*.example.org" => { "cert" => "store:0", "key" => "store:1" } })
    assert_equal "ssl://h:1?cert=c&key=k&verify_mode=none&sni[API.example.com][cert]=%2Fa+b.pem" \
                 "&sni[API.example.com][key]=%2Fa.key&sni[*.example.org][cert]=store%3A0&sni[*.example.org][key]=store%3A1", url
    assert_equal({ "api.example.com" => { cert: "/a b.pem", key: "/a.key" }, "*.example.org" => { cert: "store:0", key: "store:1" } },
                 TLS.parse_query(url, url.split("?", 2).last)[:sni])
    assert_raises(Margay::ConfigError) { TLS.bind_url("h", 1, cert: "c", key: "k", sni: ["a.test"]) }
    assert_raises(Margay::ConfigError) { TLS.bind_url("h", 1, cert: "c", key: "k", sni: { "a.test" => "c.pem" }) }
    %w[*.*.a.test a..test *a.test -a.test].each do |host|
      assert_raises(Margay::ConfigError, host) { TLS.parse_query("u", "cert=c&key=k&sni[#{host}][cert]=c&sni[#{host}][key]=k") }
    end
  end

  # Built without OpenSSL (Native::TLS false), a TLS bind refuses to start with one line.
  def test_without_openssl_a_tls_bind_refuses_to_start
    skip_on_jruby "no TLS in the pure-Ruby engine (Native::TLS is the C extension's)"
    native = Margay::Native
    saved = native::TLS
    native.send(:remove_const, :TLS)
    native.const_set(:TLS, false)
    error = assert_raises(Margay::ConfigError) { TLS.context("ssl://127.0.0.1:1", { cert: "c", key: "k" }, []) }
    assert_equal "bind ssl://127.0.0.1:1: Margay was built without OpenSSL (install libssl-dev and reinstall margay)", error.message
  ensure
    if native
      native.send(:remove_const, :TLS)
      native.const_set(:TLS, saved)
    end
  end

  def test_context_errors_are_one_line
    skip_on_jruby "no TLS in the pure-Ruby engine (Native::TLS is the C extension's)"
    skip "built without OpenSSL" unless Margay::Native::TLS
    error = assert_raises(Margay::ConfigError) { TLS.context("ssl://h:1", { cert: "/nonexistent.pem", key: "/k" }, []) }
    assert_match %r{\Abind ssl://h:1: cannot use the certificate /nonexistent.pem}, error.message
    assert_equal 1, error.message.lines.size
    error = assert_raises(Margay::ConfigError) { TLS.context("ssl://h:1", { cert: "store:3", key: "k" }, []) }
    assert_equal "bind ssl://h:1: cert=store:3 names no PEM given to ssl_bind", error.message
    error = assert_raises(Margay::ConfigError) { TLS.context("ssl://h:1", { cert: "c", key: "k", key_password_command: "exit 3" }, []) }
    assert_match(/key_password_command failed \(3\)/, error.message)
  end
end
