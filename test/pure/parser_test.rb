# frozen_string_literal: true

require "test_helper"
require "margay/pure/parser"

module Margay
  # The pure-Ruby engine's head parser against the C parser's own cases (test/ext/http/parser_test.rb)
  # and, for every case, the C parser's answer: the same status, or both a complete head.
  class PureParserTest < Minitest::Test
    def setup
      skip "the C parser's cases load the C extension (the Ruby parser is the same code on MRI)" if RUBY_ENGINE == "jruby"
      require_relative "../ext/http/parser_test"
    end

    LIMITS = %i[max_target max_head max_headers].freeze

    def pure(input, *limits)
      limits = ParserTest::DEFAULT_LIMITS.each_with_index.map { |d, i| limits.fetch(i, d) }
      Pure::Parser.parse(input.b, **LIMITS.zip(limits).to_h)
    end

    # The C parser's answer, as the Ruby parser gives it: a status, :ok or nil (incomplete).
    def c_answer(input)
      got = Native.parse_head(input.b, *ParserTest::DEFAULT_LIMITS)
      return :ok if got.is_a?(Hash)

      got.zero? ? nil : -got
    end

    def ruby_answer(input)
      got = pure(input)
      got.is_a?(Pure::Parser::Head) ? :ok : got
    end

    def test_the_c_parsers_cases
      wrong = ParserTest::CASES.filter_map do |input, want|
        want = want == :ok ? :ok : -want
        [input, want, ruby_answer(input)] unless ruby_answer(input) == want
      end
      assert_empty wrong
    end

    def test_every_complete_head_like_the_c_parser
      wrong = ParserTest::CASES.filter_map do |input, _|
        [input, c_answer(input), ruby_answer(input)] unless c_answer(input) == ruby_answer(input)
      end
      assert_empty wrong
    end

    def test_the_env_parts_of_a_head
      head = pure("GET http://Example.com:8080/a/b?x=1 HTTP/1.1\r\nHost: y\r\nConnection: close\r\n\r\n")
      assert_equal ["Example.com:8080", "/a/b", "x=1", false], [head.authority, head.path, head.query, head.keep_alive]
      head = pure("POST /up HTTP/1.1\r\nHost: y\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
      assert_equal 501, head
      head = pure("POST /up HTTP/1.0\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\n")
      assert_equal [12, true, 0], [head.content_length, head.keep_alive, head.minor]
    end
  end
end
