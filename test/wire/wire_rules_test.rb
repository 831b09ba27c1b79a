# frozen_string_literal: true

require "test_helper"
require "json"

module Margay
  # The wire rules of issue 12 and set_remote_address that the conformance corpus cannot express
  # (it needs a response to every request): PROXY v1 lines that close a connection unanswered,
  # a PROXY line split across writes, and the supported_http_methods setting as a config file
  # writes it. The accepted cases (REMOTE_ADDR from a PROXY line or a forwarding header, methods
  # served and refused, fragments, repeated Content-Length) are in test/corpus/cases.rb.
  class WireRulesTest < Minitest::Test
    include TestHelper

    ECHO = lambda do |env|
      [200, { "content-type" => "application/json" },
       [JSON.generate(env.slice("REMOTE_ADDR", "REQUEST_METHOD", "PATH_INFO"))]]
    end

    GET = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n"

    # Lines a proxy_protocol: :v1 listener must never take: each connection is closed without a
    # byte of answer, at once (the header timeout is 30 s; the read gives up after 5).
    BAD_LINES = {
      "no PROXY line" => GET,
      "lowercase" => "proxy TCP4 192.0.2.1 192.0.2.2 5000 80\r\n#{GET}",
      "no CRLF within 107 bytes" => "PROXY TCP4 #{"1" * 120}",
      "108 bytes with CRLF" => "PROXY UNKNOWN #{"x" * 92}\r\n#{GET}",
      "bare LF" => "PROXY TCP4 192.0.2.1 192.0.2.2 5000 80\n#{GET}",
      "bare CR" => "PROXY TCP4 192.0.2.1 192.0.2.2 5000 80\r#{GET}",
      "unknown protocol" => "PROXY TCP5 192.0.2.1 192.0.2.2 5000 80\r\n#{GET}",
      "family mismatch" => "PROXY TCP4 2001:db8::1 192.0.2.2 5000 80\r\n#{GET}",
      "octet out of range" => "PROXY TCP4 192.0.2.256 192.0.2.2 5000 80\r\n#{GET}",
      "port out of range" => "PROXY TCP4 192.0.2.1 192.0.2.2 65536 80\r\n#{GET}",
      "port with a leading zero" => "PROXY TCP4 192.0.2.1 192.0.2.2 05000 80\r\n#{GET}",
      "double space" => "PROXY TCP4  192.0.2.1 192.0.2.2 5000 80\r\n#{GET}",
      "trailing space" => "PROXY TCP4 192.0.2.1 192.0.2.2 5000 80 \r\n#{GET}",
      "missing port" => "PROXY TCP4 192.0.2.1 192.0.2.2 5000\r\n#{GET}",
      "NUL byte" => "PROXY TCP4 192.0.2.1\x00 192.0.2.2 5000 80\r\n#{GET}",
      "UNKNOWN glued to a word" => "PROXY UNKNOWNX\r\n#{GET}",
      "PROXY v2 signature" => "\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c#{"\x00" * 12}#{GET}"
    }.freeze

    def test_invalid_proxy_lines_close_the_connection_unanswered
      with_server(ECHO, proxy_protocol: :v1, header_timeout: 30) do |_host, port|
        BAD_LINES.each do |what, bytes|
          got = raw_exchange(port, bytes.b, timeout: 5)
          assert_equal "", got, "#{what}: closed without an answer"
        end
        # The server is still serving.
        assert_includes raw_exchange(port, "PROXY TCP4 192.0.2.1 192.0.2.2 5000 80\r\nGET / HTTP/1.1\r\nHost: a\r\n" \
                                           "Connection: close\r\n\r\n"), "192.0.2.1"
      end
    end

    def test_proxy_line_split_across_writes
      with_server(ECHO, proxy_protocol: :v1) do |_host, port|
        client = Wire::Client.open(port)
        ["PROX", "Y TCP4 198.51.100.", "7 192.0.2.2 5000", " 80\r", "\nGET /x HT", "TP/1.1\r\nHost: a\r\n\r\n"].each do |part|
          client.write(part)
          sleep 0.02 # separate segments, so each arrives in a read of its own
        end
        _, res = client.read_final
        assert_equal 200, res.status
        assert_equal "198.51.100.7", JSON.parse(res.body)["REMOTE_ADDR"]
        # Every later request on the connection keeps the address; no second line is expected.
        client.write(GET)
        _, res = client.read_final
        assert_equal "198.51.100.7", JSON.parse(res.body)["REMOTE_ADDR"]
      ensure
        client&.close
      end
    end

    # An IPv4 client of a dual-stack listener ([::], what Puma's -p binds) is shown as IPv4, as
    # Puma shows it, not as ::ffff:127.0.0.1.
    def test_ipv4_client_of_a_dual_stack_listener
      config = Configuration.new(binds: ["tcp://[::]:0"], quiet: true, event_backend: BACKEND)
      log = StringIO.new
      server = Server.new(Rack::Lint.new(ECHO), config, log: Log.new(out: log, err: log))
      server.bind
      thread = Thread.new { server.run }
      port = server.addresses.first[/:(\d+)\z/, 1].to_i
      got = raw_exchange(port, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
      assert_equal "127.0.0.1", JSON.parse(got.split("\r\n\r\n", 2).last)["REMOTE_ADDR"], log.string
    ensure
      server&.stop
      thread&.join(10)
    end

    def test_supported_http_methods_from_a_puma_config_file
      settings = Configuration::DSL.evaluate("supported_http_methods %w[GET PROPFIND]\n")
      assert_equal %w[GET PROPFIND], Configuration.new(**settings).supported_http_methods
      assert_equal :any, Configuration.new(**Configuration::DSL.evaluate("supported_http_methods :any\n")).supported_http_methods
      assert_raises(ConfigError) { Configuration.new(**Configuration::DSL.evaluate("supported_http_methods []\n")) }
    end

    def test_supported_http_methods_default_is_pumas
      assert_equal %w[HEAD GET POST PUT DELETE OPTIONS TRACE PATCH], Configuration.new.supported_http_methods
    end

    def test_supported_http_methods_validation
      [[], ["GET", "GET"], ["G T"], [""], ["M" * 21], [:GET], "GET", :all, Array.new(65) { |i| "M#{i}" }].each do |bad|
        assert_raises(ConfigError, bad.inspect) { Configuration.new(supported_http_methods: bad) }
      end
      assert_equal ["M" * 20, "get"], Configuration.new(supported_http_methods: ["M" * 20, "get"]).supported_http_methods
    end

    def test_a_custom_method_list_reaches_the_engine
      with_server(ECHO, supported_http_methods: %w[GET PROPFIND]) do |_host, port|
        assert_includes raw_exchange(port, "PROPFIND / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"), "PROPFIND"
        assert_match %r{\AHTTP/1.1 501 }, raw_exchange(port, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
      end
    end
  end
end
