# frozen_string_literal: true

require "test_helper"
require "margay/margay_native"

module Margay
  # The request head parser (ext/margay/http/parser.c) through Margay::Native.parse_head.
  class ParserTest < Minitest::Test
    # A request with a request line and field lines, ended by the empty line.
    def self.req(line, *fields)
      "#{line}\r\n#{fields.map { |f| "#{f}\r\n" }.join}\r\n".b
    end

    # An HTTP/1.1 GET with a Host field plus +fields+.
    def self.get(*fields)
      req("GET / HTTP/1.1", "Host: example.com", *fields)
    end

    # Inputs with the status they must give (a negative Integer) or :ok. Every rule of the parser
    # appears here, and all of them also go through the incremental-feeding property test.
    CASES = [
      # Request line
      [get, :ok],
      [req("get / HTTP/1.1", "Host: a"), :ok],
      ["\r\n\r\n#{get}", :ok],
      ["\n#{get}", -400],
      ["\r#{get}", -400],
      [" #{get}", -400],
      [req("GET  / HTTP/1.1", "Host: a"), -400],
      [req("GET /  HTTP/1.1", "Host: a"), -400],
      [req("GET\t/ HTTP/1.1", "Host: a"), -400],
      [req(" / HTTP/1.1", "Host: a"), -400],
      [req("G@T / HTTP/1.1", "Host: a"), -400],
      [req("GE(T / HTTP/1.1", "Host: a"), -400],
      [req("CONNECT example.com:443 HTTP/1.1", "Host: example.com:443"), -501],
      [req("GET / HTTP/1.1 ", "Host: a"), -400],
      # Methods: any token up to 20 bytes (this binding passes no method list)
      [req("#{"M" * 20} / HTTP/1.1", "Host: a"), :ok],
      [req("#{"M" * 21} / HTTP/1.1", "Host: a"), -501],
      [req("#{"M" * 9000} / HTTP/1.1", "Host: a"), -501],
      ["GET / HTTP/1.1\nHost: a\r\n\r\n", -400],
      ["GET / HTTP/1.1\rHost: a\r\n\r\n", -400],
      ["GET /\r\n\r\n", -400],
      ["GET\r\n\r\n", -400],
      # Versions
      [req("GET / HTTP/1.0"), :ok],
      [req("GET / HTTP/1.2", "Host: a"), :ok],
      [req("GET / HTTP/1.9", "Host: a"), :ok],
      [req("GET / HTTP/2.0", "Host: a"), -505],
      [req("GET / HTTP/0.9"), -505],
      [req("GET / HTTP/3.0", "Host: a"), -505],
      [req("GET / HTTP/1", "Host: a"), -400],
      [req("GET / HTTP/1.1.1", "Host: a"), -400],
      [req("GET / http/1.1", "Host: a"), -400],
      [req("GET / HTTP/11", "Host: a"), -400],
      [req("GET / HTTP/1.x", "Host: a"), -400],
      [req("GET / HTTPS/1.1", "Host: a"), -400],
      ["PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", -505],
      # Request targets
      [req("GET /a/b?c=d&e HTTP/1.1", "Host: a"), :ok],
      [req("GET /a#frag HTTP/1.1", "Host: a"), :ok],
      [req("GET /a?b=1#f/r?a:g@ HTTP/1.1", "Host: a"), :ok],
      [req("GET /a# HTTP/1.1", "Host: a"), :ok],
      [req("GET /a#b#c HTTP/1.1", "Host: a"), -400],
      [req("GET #frag HTTP/1.1", "Host: a"), -400],
      [req("GET /a#\x7F HTTP/1.1", "Host: a"), -400],
      [req("GET /a\x7F HTTP/1.1", "Host: a"), -400],
      [req("GET /a\x80 HTTP/1.1", "Host: a"), -400],
      [req("GET /a\x01 HTTP/1.1", "Host: a"), -400],
      [req("GET /a\tb HTTP/1.1", "Host: a"), -400],
      [req("GET http://example.com/x?y HTTP/1.1", "Host: a"), :ok],
      [req("GET HTTPS://example.com HTTP/1.1", "Host: a"), :ok],
      [req("GET http://example.com:8080?q HTTP/1.1", "Host: a"), :ok],
      [req("GET http://[::1]:80/ HTTP/1.1", "Host: a"), :ok],
      [req("GET http:// HTTP/1.1", "Host: a"), -400],
      [req("GET http:///x HTTP/1.1", "Host: a"), -400],
      [req("GET http://:80/ HTTP/1.1", "Host: a"), -400],
      [req("GET http://user@example.com/ HTTP/1.1", "Host: a"), -400],
      [req("GET http://example.com:x/ HTTP/1.1", "Host: a"), -400],
      [req("GET ftp://example.com/ HTTP/1.1", "Host: a"), -400],
      [req("GET http:/example.com/ HTTP/1.1", "Host: a"), -400],
      [req("GET example.com:80 HTTP/1.1", "Host: a"), -400],
      [req("GET a/b HTTP/1.1", "Host: a"), -400],
      [req("OPTIONS * HTTP/1.1", "Host: a"), :ok],
      [req("GET * HTTP/1.1", "Host: a"), -400],
      [req("options * HTTP/1.1", "Host: a"), -400],
      [req("OPTIONS *x HTTP/1.1", "Host: a"), -400],
      # Field lines
      [get("X-A: 1", "x_b: 2", "Empty:", "Spaces:   \t "), :ok],
      [get("X-Obs: caf\xC3\xA9 \xFF"), :ok],
      [get("X-Tab: a\tb"), :ok],
      [get("X-A : 1"), -400],
      [get("X-A\t: 1"), -400],
      [get(": 1"), -400],
      [get("X-A 1"), -400],
      [get("X(A): 1"), -400],
      [get("X-A: 1", " folded"), -400],
      [get("X-A: 1", "\tfolded"), -400],
      [req("GET / HTTP/1.1", " Host: a"), -400],
      ["GET / HTTP/1.1\r\nHost: a\nX: 1\r\n\r\n", -400],
      ["GET / HTTP/1.1\r\nHost: a\rX: 1\r\n\r\n", -400],
      ["GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", -400],
      ["GET / HTTP/1.1\r\nHost: a\r\n\n", -400],
      ["GET / HTTP/1.1\r\nHost: a\r\n\r\r\n", -400],
      [get("X: a\x00b"), -400],
      [get("X: a\x7Fb"), -400],
      [get("X: a\x1Fb"), -400],
      [get("X\x00: a"), -400],
      # Content-Length
      [get("Content-Length: 0"), :ok],
      [get("Content-Length: 5, 5"), -400],
      [get("Content-Length: 5,5 , 5"), -400],
      [get("Content-Length: 5,"), -400],
      [get("Content-Length: 5", "content-length: 5"), -400],
      [get("Content-Length: 007", "Content-Length: 7"), -400],
      [get("Content-Length: 007"), :ok],
      [get("Content-Length: 999999999999999999"), :ok],
      [get("Content-Length: 0000999999999999999999"), :ok],
      [get("Content-Length: 1000000000000000000"), -413],
      [get("Content-Length: 99999999999999999999999999"), -413],
      [get("Content-Length: 5", "Content-Length: 6"), -400],
      [get("Content-Length: 5, 6"), -400],
      [get("Content-Length:"), -400],
      [get("Content-Length: +5"), -400],
      [get("Content-Length: -1"), -400],
      [get("Content-Length: 0x5"), -400],
      [get("Content-Length: 5 5"), -400],
      [get("Content-Length: 5,"), -400],
      [get("Content-Length: ,5"), -400],
      [get("Content-Length: 5,,5"), -400],
      [get("Content-Length: 5.0"), -400],
      [get("Content-Length: ５"), -400],
      # Transfer-Encoding
      [get("Transfer-Encoding: chunked"), :ok],
      [get("Transfer-Encoding: CHUNKED"), :ok],
      [get("Transfer-Encoding: , chunked ,"), :ok],
      [get("Transfer-Encoding: gzip, chunked"), -501],
      [get("Transfer-Encoding: gzip", "Transfer-Encoding: chunked"), -501],
      [get("Transfer-Encoding: deflate,chunked"), -501],
      [get("Transfer-Encoding: compress, chunked"), -501],
      [get("Transfer-Encoding: foo, chunked"), -501],
      [get("Transfer-Encoding: gzip;q=1, chunked"), -501],
      [get("Transfer-Encoding: x;a=\"b,c\", chunked"), -501],
      [get("Transfer-Encoding: chunked;a=b"), -400],
      [get("Transfer-Encoding: chunked, gzip"), -400],
      [get("Transfer-Encoding: gzip"), -400],
      [get("Transfer-Encoding: identity"), -400],
      [get("Transfer-Encoding: chunked, chunked"), -400],
      [get("Transfer-Encoding: chunked", "Transfer-Encoding: chunked"), -400],
      [get("Transfer-Encoding:"), -400],
      [get("Transfer-Encoding: ,"), -400],
      [get("Transfer-Encoding: chunked", "Transfer-Encoding:"), -400],
      [get("Transfer-Encoding: chun ked"), -400],
      [get("Transfer-Encoding: \"chunked\""), -400],
      [get("Transfer-Encoding: chunked\x0B"), -400],
      [get("Transfer-Encoding: gzip;q, chunked"), -400],
      [get("Transfer-Encoding: chunked", "Content-Length: 5"), -400],
      [get("Content-Length: 5", "Transfer-Encoding: chunked"), -400],
      [req("POST / HTTP/1.0", "Transfer-Encoding: chunked"), -400],
      [get("Transfer_Encoding: chunked"), :ok],
      # Host
      [req("GET / HTTP/1.1"), -400],
      [req("GET / HTTP/1.0"), :ok],
      [req("GET / HTTP/1.0", "Host: a", "Host: a"), -400],
      [get("Host: example.com"), -400],
      [req("GET / HTTP/1.1", "Host:"), :ok],
      [req("GET / HTTP/1.1", "Host: example.com:8080"), :ok],
      [req("GET / HTTP/1.1", "Host: example.com:"), :ok],
      [req("GET / HTTP/1.1", "Host: 127.0.0.1"), :ok],
      [req("GET / HTTP/1.1", "Host: [::1]:80"), :ok],
      [req("GET / HTTP/1.1", "Host: [v1.fe80::a+en1]"), :ok],
      [req("GET / HTTP/1.1", "Host: ex%41mple.com"), :ok],
      [req("GET / HTTP/1.1", "Host: a!$&'()*+;=-._~"), :ok],
      [req("GET / HTTP/1.1", "Host: exa mple.com"), -400],
      [req("GET / HTTP/1.1", "Host: example.com/x"), -400],
      [req("GET / HTTP/1.1", "Host: user@example.com"), -400],
      [req("GET / HTTP/1.1", "Host: a.com,b.com"), -400],
      [req("GET / HTTP/1.1", "Host: a:b"), -400],
      [req("GET / HTTP/1.1", "Host: a:80:80"), -400],
      [req("GET / HTTP/1.1", "Host: ex%4"), -400],
      [req("GET / HTTP/1.1", "Host: [::1"), -400],
      [req("GET / HTTP/1.1", "Host: []"), -400],
      [req("GET / HTTP/1.1", "Host: [zz::1]"), -400],
      [req("GET / HTTP/1.1", "Host: \xC3\xA9"), -400],
      # Connection and Expect
      [get("Connection: close"), :ok],
      [get("Connection: keep-alive, Close"), :ok],
      [get("Connection: Upgrade"), :ok],
      [req("GET / HTTP/1.0", "Connection: Keep-Alive"), :ok],
      [get("Expect: 100-continue"), :ok],
      [get("Expect: 100-Continue"), :ok],
      [get("Expect:"), :ok],
      [get("Expect: 200-ok"), -417],
      [get("Expect: 100-continue, foo"), -417],
      [req("GET / HTTP/1.0", "Expect: 200-ok"), :ok],
    ].freeze

    # The limits default to the server's (Configuration::DEFAULTS); a test may pass its own.
    DEFAULT_LIMITS = Configuration::DEFAULTS.values_at(:max_request_target, :max_header_size, :max_headers).freeze

    def parse(str, *limits)
      Native.parse_head(str.b, *limits, *DEFAULT_LIMITS.drop(limits.size))
    end

    def test_cases
      CASES.each do |input, want|
        got = parse(input)
        if want == :ok
          assert_kind_of Hash, got, input.inspect
          assert_equal input.bytesize, got[:head_len], input.inspect
        else
          assert_equal want, got, input.inspect
        end
      end
    end

    def test_simple_get
      head = "GET /p/a%20th?x=1&y HTTP/1.1\r\nHost: example.com\r\nX-Thing:  v a l \t\r\n\r\n"
      r = parse("#{head}BODY")
      assert_equal "GET", r[:method]
      assert_equal "/p/a%20th?x=1&y", r[:target]
      assert_equal "/p/a%20th", r[:path]
      assert_equal "x=1&y", r[:query]
      assert_equal "", r[:authority]
      assert_equal :origin, r[:form]
      assert_equal 1, r[:minor]
      assert_equal [%w[Host example.com], ["X-Thing", "v a l"]], r[:headers]
      assert_nil r[:content_length]
      refute r[:chunked]
      assert r[:keep_alive]
      refute r[:expect_continue]
      assert_equal "example.com", r[:host]
      assert_equal head.bytesize, r[:head_len]
    end

    def test_head_len_counts_leading_empty_lines_and_stops_before_pipelined_bytes
      head = "\r\n\r\nGET / HTTP/1.0\r\n\r\n"
      r = parse("#{head}GET / HTTP/1.0\r\n\r\n")
      assert_equal head.bytesize, r[:head_len]
      assert_equal "GET", r[:method]
    end

    def test_empty_value_and_empty_host
      r = parse("GET / HTTP/1.1\r\nHost:\r\nX-E: \t \r\n\r\n")
      assert_equal [["Host", ""], ["X-E", ""]], r[:headers]
      assert_equal "", r[:host]
      assert_nil parse("GET / HTTP/1.0\r\n\r\n")[:host]
    end

    def test_obs_text_passes_through
      r = parse("GET / HTTP/1.1\r\nHost: a\r\nX: caf\xC3\xA9\r\n\r\n".b)
      assert_equal "caf\xC3\xA9".b, r[:headers][1][1].b
    end

    def test_underscore_names_are_passed_through
      r = parse(self.class.get("X_Forwarded_For: 1.2.3.4"))
      assert_equal ["X_Forwarded_For", "1.2.3.4"], r[:headers][1]
    end

    def test_versions
      assert_equal 0, parse(self.class.req("GET / HTTP/1.0"))[:minor]
      assert_equal 1, parse(self.class.req("GET / HTTP/1.1", "Host: a"))[:minor]
      assert_equal 1, parse(self.class.req("GET / HTTP/1.7", "Host: a"))[:minor]
    end

    def test_absolute_form
      r = parse(self.class.req("GET HTTP://Example.com:8080/a/b?c HTTP/1.1", "Host: other"))
      assert_equal :absolute, r[:form]
      assert_equal "Example.com:8080", r[:authority]
      assert_equal "/a/b", r[:path]
      assert_equal "c", r[:query]
      assert_equal "other", r[:host]
    end

    def test_absolute_form_with_empty_path_has_an_empty_path_span
      r = parse(self.class.req("GET https://example.com?q=1 HTTP/1.1", "Host: a"))
      assert_equal "example.com", r[:authority]
      assert_equal "", r[:path]
      assert_equal "q=1", r[:query]
      r = parse(self.class.req("GET http://example.com HTTP/1.1", "Host: a"))
      assert_equal ["", "", "example.com"], r.values_at(:path, :query, :authority)
    end

    def test_asterisk_form
      r = parse(self.class.req("OPTIONS * HTTP/1.1", "Host: a"))
      assert_equal :asterisk, r[:form]
      assert_equal "*", r[:target]
      assert_equal "", r[:path]
    end

    def test_query_keeps_later_question_marks
      r = parse(self.class.req("GET /a?b?c HTTP/1.1", "Host: a"))
      assert_equal ["/a", "b?c"], r.values_at(:path, :query)
    end

    def test_target_limit
      target = "/#{"a" * 99}"
      assert_kind_of Hash, parse(self.class.req("GET #{target} HTTP/1.1", "Host: a"), 100)
      assert_equal(-414, parse(self.class.req("GET #{target}b HTTP/1.1", "Host: a"), 100))
      # Detected before the request line ends.
      assert_equal(-414, parse("GET #{target}b", 100))
      assert_equal 0, parse("GET #{target}", 100)
    end

    def test_head_limit
      head = self.class.get("X: #{"v" * 50}")
      assert_kind_of Hash, parse(head, 8192, head.bytesize)
      assert_equal(-431, parse(head, 8192, head.bytesize - 1))
      # Detected while incomplete.
      assert_equal(-431, parse(head[0, 40], 8192, 39))
      assert_equal 0, parse(head[0, 40], 8192, 41)
      # Leading empty lines count.
      assert_equal(-431, parse("\r\n#{head}", 8192, head.bytesize + 1))
    end

    def test_unterminated_long_request_line_prefers_414
      assert_equal(-414, parse("GET /#{"a" * 200}", 100, 150))
      # The target is within its limit when the head limit is crossed: 431.
      assert_equal(-431, parse("GET /#{"a" * 200}", 1000, 150))
    end

    def test_header_count_limit
      fields = (1..10).map { |i| "X-#{i}: #{i}" }
      assert_kind_of Hash, parse(self.class.req("GET / HTTP/1.1", "Host: a", *fields[0, 9]), 8192, 65_536, 10)
      assert_equal(-431, parse(self.class.req("GET / HTTP/1.1", "Host: a", *fields), 8192, 65_536, 10))
      assert_equal(-431, parse("#{self.class.req("GET / HTTP/1.1", "Host: a", *fields)[0..-3]}X", 8192, 65_536, 10))
      assert_raises(ArgumentError) { parse(self.class.get, 8192, 65_536, 257) }
      many = (1..256).map { |i| "X-#{i}: #{i}" }
      assert_equal 256, parse(self.class.req("GET / HTTP/1.0", *many), 8192, 65_536, 256)[:headers].size
    end

    def test_content_length
      assert_equal 0, parse(self.class.get("Content-Length: 0"))[:content_length]
      assert_equal 7, parse(self.class.get("Content-Length: 007"))[:content_length]
      assert_equal 999_999_999_999_999_999, parse(self.class.get("Content-Length: 000999999999999999999"))[:content_length]
    end

    def test_transfer_encoding
      r = parse(self.class.get("Transfer-Encoding: chunked"))
      assert r[:chunked]
      assert_nil r[:content_length]
      refute parse(self.class.get)[:chunked]
    end

    def test_connection
      assert parse(self.class.get)[:keep_alive]
      refute parse(self.class.get("Connection: close"))[:keep_alive]
      refute parse(self.class.get("Connection: keep-alive", "Connection: CLOSE"))[:keep_alive]
      assert parse(self.class.get("Connection: upgrade, keep-alive"))[:keep_alive]
      refute parse(self.class.req("GET / HTTP/1.0"))[:keep_alive]
      assert parse(self.class.req("GET / HTTP/1.0", "Connection: foo ,Keep-Alive"))[:keep_alive]
      refute parse(self.class.req("GET / HTTP/1.0", "Connection: keep-alive, close"))[:keep_alive]
      refute parse(self.class.req("GET / HTTP/1.0", "Connection: keep-alivex"))[:keep_alive]
    end

    def test_expect
      assert parse(self.class.get("Expect: 100-continue"))[:expect_continue]
      refute parse(self.class.get("Expect:"))[:expect_continue]
      refute parse(self.class.get)[:expect_continue]
      refute parse(self.class.req("GET / HTTP/1.0", "Expect: 100-continue"))[:expect_continue]
    end

    def test_incomplete_inputs
      ["", "G", "GET", "GET ", "GET /", "GET / HTTP/1.", "GET / HTTP/1.1\r", "GET / HTTP/1.1\r\n",
       "GET / HTTP/1.1\r\nHost: a\r\n", "GET / HTTP/1.1\r\nHost: a\r\n\r", "\r\n", "\r"].each do |s|
        assert_equal 0, parse(s), s.inspect
      end
    end

    def test_errors_are_found_before_the_head_ends
      assert_equal(-400, parse("G@"))
      assert_equal(-400, parse("GET /##"))
      assert_equal(-400, parse("GET / HTTP/1.1\n"))
      assert_equal(-400, parse("GET / HTTP/1.1\r\nHost : "))
      assert_equal(-400, parse("GET / HTTP/1.1\r\nHost: a\x00"))
      assert_equal(-501, parse("CONNECT a:1 HTTP/1.1\r\n"))
      assert_equal(-501, parse("M" * 21))
      assert_equal(-505, parse("GET / HTTP/5.6\r\n"))
      # A completed field line that makes the head invalid answers without the rest.
      assert_equal(-400, parse("GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n"))
      assert_equal(-400, parse("POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n"))
      assert_equal(-400, parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n"))
      assert_equal(-400, parse("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n"))
      assert_equal(-400, parse("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n"))
      assert_equal(-400, parse("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n"))
      assert_equal(-400, parse("GET / HTTP/1.1\r\nHost: a,b\r\n"))
      assert_equal(-417, parse("GET / HTTP/1.1\r\nExpect: 200-ok\r\n"))
      assert_equal(-413, parse("GET / HTTP/1.1\r\nContent-Length: 1000000000000000000\r\n"))
      # Only the whole head can say that Host is missing or which coding is last.
      assert_equal 0, parse("GET / HTTP/1.1\r\nX: y\r\n")
      assert_equal 0, parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n")
    end

    def test_fragment_is_dropped
      r = parse(self.class.req("GET /a/b?c=d#frag HTTP/1.1", "Host: a"))
      assert_equal ["/a/b?c=d", "/a/b", "c=d"], r.values_at(:target, :path, :query)
      r = parse(self.class.req("GET http://h.example/p?q#f HTTP/1.1", "Host: a"))
      assert_equal ["http://h.example/p?q", "/p", "q", "h.example"], r.values_at(:target, :path, :query, :authority)
      # The fragment counts towards the target limit (it is on the wire).
      assert_equal(-414, parse(self.class.req("GET /a#bcdefghij HTTP/1.1", "Host: a"), 8))
    end

    def test_method_length_bound
      assert_equal "A" * 20, parse(self.class.req("#{"A" * 20} / HTTP/1.1", "Host: a"))[:method]
      assert_equal(-501, parse("#{"A" * 21} / HTTP/1.1\r\n"))
      assert_equal(-501, parse("#{"A" * 60_000} / HTTP/1.1\r\nHost: a\r\n\r\n", 8192, 65_536))
    end

    # Feeding a growing prefix must give 0 until the first answer, and that answer must be the
    # same as for the whole input, and stay the same for every longer prefix.
    def assert_prefix_consistent(input, *limits)
      whole = parse(input, *limits)
      first = nil
      (0..input.bytesize).each do |n|
        got = parse(input.byteslice(0, n), *limits)
        if first.nil?
          next if got == 0

          first = got
          assert_equal whole, got, "prefix #{n} of #{input.inspect}"
        else
          assert_equal first, got, "prefix #{n} of #{input.inspect}"
        end
      end
      assert_equal 0, whole, "#{input.inspect} answered only when whole" if first.nil?
    end

    def test_byte_at_a_time_equals_all_at_once_for_every_case
      CASES.each { |input, _| assert_prefix_consistent(input.b) }
    end

    def test_byte_at_a_time_equals_all_at_once_with_tight_limits
      CASES.each do |input, _|
        [[4, 64, 2], [20, 30, 1], [1, 200, 0]].each { |limits| assert_prefix_consistent(input.b, *limits) }
      end
    end

    ALPHABET = ["\r", "\n", "\r\n", " ", "\t", ":", ",", ";", "\x00", "\x7F", "\xFF", "a", "1", "/", "?", "#",
                "@", "[", "]", "%", "*", "\"", "chunked", "Host", "Content-Length", "Transfer-Encoding",
                "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "close", "Expect", "100-continue"].map(&:b).freeze

    def test_byte_at_a_time_equals_all_at_once_for_mutated_inputs
      rng = Random.new(20_240_601)
      seeds = CASES.map { |input, _| input.b }
      1500.times do
        input = seeds.sample(random: rng).dup
        rng.rand(1..4).times do
          at = rng.rand(0..input.bytesize)
          case rng.rand(3)
          when 0 then input = input.byteslice(0, at) + ALPHABET.sample(random: rng) + input.byteslice(at..)
          when 1 then input = input.byteslice(0, at) + input.byteslice((at + rng.rand(1..4))..).to_s
          else input = input.byteslice(0, at) + rng.bytes(rng.rand(1..3)) + input.byteslice(at..)
          end
        end
        assert_prefix_consistent(input, *[[8192, 65_536, 100], [10, 60, 3]].sample(random: rng))
      end
    end
  end
end
