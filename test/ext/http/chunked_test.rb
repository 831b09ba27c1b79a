# frozen_string_literal: true

require "test_helper"
require "margay/margay_native"

module Margay
  # The chunked decoder (ext/margay/http/chunked.c) through Margay::Native::ChunkedDecoder.
  class ChunkedTest < Minitest::Test
    # Inputs with [result, decoded body] (result 1 = done, 0 = needs more, < 0 = -status).
    # All of them also go through the split-feeding property tests.
    CASES = [
      ["0\r\n\r\n", 1, ""],
      ["5\r\nhello\r\n0\r\n\r\n", 1, "hello"],
      ["5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 1, "hello world"],
      ["a\r\n0123456789\r\nA\r\n0123456789\r\n0\r\n\r\n", 1, "0123456789" * 2],
      ["000000005\r\nhello\r\n00\r\n\r\n", 1, "hello"],
      ["#{"0" * 31}5\r\nhello\r\n0\r\n\r\n", 1, "hello"],
      ["#{"0" * 32}5\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a\r\nhello\r\n0;b=c\r\n\r\n", 1, "hello"],
      ["5 ;a\r\nhello\r\n0\r\n\r\n", 1, "hello"],
      ["5\t; a = b ; c=\"d;e\"\r\nhello\r\n0\r\n\r\n", 1, "hello"],
      ["5;a=\"x\\\"y\\\\z\"\r\nhello\r\n0\r\n\r\n", 1, "hello"],
      ["5;a=\"caf\xC3\xA9\t\"\r\nhello\r\n0\r\n\r\n", 1, "hello"],
      ["5;a;b;c\r\nhello\r\n0\r\n\r\n", 1, "hello"],
      ["5;a ;b\r\nhello\r\n0\r\n\r\n", 1, "hello"],
      ["5 \r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5\t\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a \r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a=b \r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;=b\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a=\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a=b=c\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a=\"b\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a=\"b\"c\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a=\"b\x01\"\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a=\"b\\\x01\"\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a=\"b\x7F\"\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a\nb\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5;a@b\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5 5\r\nhello\r\n0\r\n\r\n", -400, ""],
      [" 5\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["\r\n5\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["0x5\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["+5\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["-5\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["g\r\nhello\r\n0\r\n\r\n", -400, ""],
      [";a\r\nhello\r\n0\r\n\r\n", -400, ""],
      ["5\nhello\r\n0\r\n\r\n", -400, ""],
      ["5\rhello\r\n0\r\n\r\n", -400, ""],
      ["5\r\nhelloX\r\n0\r\n\r\n", -400, "hello"],
      ["5\r\nhello\n0\r\n\r\n", -400, "hello"],
      ["5\r\nhello\rX0\r\n\r\n", -400, "hello"],
      ["5\r\nhello0\r\n\r\n", -400, "hello"],
      ["3\r\nhello\r\n0\r\n\r\n", -400, "hel"],
      ["0\r\n", 0, ""],
      ["5\r\nhel", 0, "hel"],
      ["0\r\nX-Trailer: yes\r\nOther: a b\t\xFF\r\n\r\n", 1, ""],
      ["0\r\nEmpty:\r\n\r\n", 1, ""],
      ["0\r\n folded: x\r\n\r\n", -400, ""],
      ["0\r\nX: 1\r\n folded\r\n\r\n", -400, ""],
      ["0\r\nX : 1\r\n\r\n", -400, ""],
      ["0\r\n: 1\r\n\r\n", -400, ""],
      ["0\r\nX\r\n\r\n", -400, ""],
      ["0\r\nX: 1\n\r\n", -400, ""],
      ["0\r\nX: a\x00b\r\n\r\n", -400, ""],
      ["0\r\nX: a\rb\r\n\r\n", -400, ""],
      ["0\r\n\n", -400, ""],
      ["0\r\n\rX", -400, ""],
      ["0\r\n\r\n", 1, ""],
      ["fffffffffffffff\r\n", 0, ""],
      ["FFFFFFFFFFFFFFF\r\n", 0, ""],
      ["1000000000000000\r\n", -400, ""],
      ["ffffffffffffffff\r\n", -400, ""],
      ["0001000000000000000\r\n", -400, ""],
    ].map { |input, result, body| [input.b, result, body.b] }.freeze

    def decoder(max_body = nil, max_ext = 1024, max_trailer = 1024)
      Native::ChunkedDecoder.new(max_body, max_ext, max_trailer)
    end

    # Feed +pieces+ in order, stop at the first non-zero result. Returns
    # [result, decoded body, bytes consumed in total].
    def feed_pieces(pieces, dec = decoder)
      body = +"".b
      consumed = 0
      result = 0
      pieces.each do |piece|
        result, used, out = dec.feed(piece)
        assert_operator used, :<=, piece.bytesize
        assert_operator out.bytesize, :<=, used
        body << out
        consumed += used
        assert_equal piece.bytesize, used, "only done or an error may leave input" if result == 0
        break if result != 0
      end
      [result, body, consumed]
    end

    def test_cases
      CASES.each do |input, want, body|
        dec = decoder
        result, out, = feed_pieces([input], dec)
        assert_equal want, result, input.inspect
        assert_equal body, out, input.inspect if want >= 0
        assert_equal out.bytesize, dec.total, input.inspect if want >= 0
      end
    end

    def test_decodes_and_stops_at_the_end_of_the_body
      dec = decoder
      result, used, out = dec.feed("5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n")
      assert_equal [1, 15, "hello"], [result, used, out]
      assert_equal 5, dec.total
    end

    def test_feeding_after_done_or_error_repeats_the_result
      dec = decoder
      assert_equal 1, dec.feed("0\r\n\r\n")[0]
      assert_equal [1, 0, ""], dec.feed("5\r\nhello")
      dec = decoder
      assert_equal(-400, dec.feed("x")[0])
      assert_equal [-400, 0, ""], dec.feed("5\r\nhello\r\n")
    end

    def test_body_limit_is_checked_on_the_size_before_the_data
      assert_equal(-413, decoder(5).feed("6\r\n")[0])
      assert_equal 0, decoder(5).feed("6")[0], "the size may still grow: no verdict yet"
      assert_equal(-413, decoder(5).feed("6;")[0])
      assert_equal 1, feed_pieces(["5\r\nhello\r\n0\r\n\r\n"], decoder(5))[0]
      dec = decoder(8)
      assert_equal 0, dec.feed("5\r\nhello\r\n")[0]
      assert_equal(-413, dec.feed("4\r\n")[0])
      assert_equal 5, dec.total
    end

    def test_body_limit_with_leading_zeros_and_huge_sizes
      assert_equal(-413, decoder(10).feed("000000b\r")[0])
      assert_equal(-400, decoder(10).feed("1000000000000000\r")[0], "16 significant digits: malformed before too large")
      assert_equal(-413, decoder(2**59).feed("fffffffffffffff\r\n")[0])
      assert_equal 0, decoder(2**60).feed("fffffffffffffff\r\n")[0]
    end

    def test_total_does_not_overflow
      dec = decoder(nil)
      assert_equal 0, dec.feed("fffffffffffffff\r\n")[0]
      assert_equal 0, dec.feed("a" * 10)[0]
      assert_equal 10, dec.total
    end

    def test_extension_limit_counts_across_the_whole_body
      assert_equal 1, feed_pieces(["1;abc\r\nx\r\n0;def\r\n\r\n"], decoder(nil, 8))[0]
      assert_equal(-400, feed_pieces(["1;abc\r\nx\r\n0;defg\r\n\r\n"], decoder(nil, 8))[0])
      assert_equal(-400, decoder(nil, 3).feed("1 ; a")[0])
      assert_equal(-400, feed_pieces(["1;#{"a" * 100}"], decoder(nil, 64))[0])
    end

    def test_trailer_limit
      trailer = "X: 12\r\n"
      assert_equal 1, feed_pieces(["0\r\n#{trailer}\r\n"], decoder(nil, 0, trailer.bytesize))[0]
      assert_equal(-431, feed_pieces(["0\r\n#{trailer}\r\n"], decoder(nil, 0, trailer.bytesize - 1))[0])
      assert_equal 1, feed_pieces(["0\r\n\r\n"], decoder(nil, 0, 0))[0]
      assert_equal(-431, feed_pieces(["0\r\n#{trailer * 100}"], decoder(nil, 0, 64))[0])
    end

    def test_arguments
      assert_raises(ArgumentError) { Native::ChunkedDecoder.new(nil, -1, 0) }
      assert_raises(ArgumentError) { Native::ChunkedDecoder.new(-1, 0, 0) }
      assert_equal 0, Native::ChunkedDecoder.new(2**64 - 1, 0, 0).feed("f" * 15)[0]
      assert_raises(TypeError) { decoder.feed(5) }
    end

    def pieces_at(input, cuts)
      edges = [0, *cuts.sort, input.bytesize]
      edges.each_cons(2).map { |a, b| input.byteslice(a, b - a) }
    end

    def assert_same_when_split(input, limits, splits)
      whole = feed_pieces([input], decoder(*limits))
      bytes = feed_pieces(input.bytes.map(&:chr), decoder(*limits))
      assert_equal whole, bytes, "byte at a time: #{input.inspect}"
      splits.each do |cuts|
        assert_equal whole, feed_pieces(pieces_at(input, cuts), decoder(*limits)), "cut at #{cuts}: #{input.inspect}"
      end
    end

    def test_byte_at_a_time_and_every_split_equal_all_at_once
      CASES.each do |input, _|
        splits = (1...input.bytesize).map { |k| [k] }
        assert_same_when_split(input, [nil, 1024, 1024], splits)
        assert_same_when_split(input, [7, 4, 6], splits)
      end
    end

    ALPHABET = ["\r", "\n", "\r\n", " ", "\t", ";", "=", "\"", "\\", "\x00", "\xFF", "0", "5", "f", "a", "X:",
                "0\r\n\r\n", "10\r\n"].map(&:b).freeze

    def test_random_splits_of_mutated_inputs
      rng = Random.new(7_411)
      seeds = CASES.map(&:first)
      1500.times do
        input = seeds.sample(random: rng).dup
        rng.rand(0..3).times do
          at = rng.rand(0..input.bytesize)
          input = if rng.rand(2).zero?
                    input.byteslice(0, at) + ALPHABET.sample(random: rng) + input.byteslice(at..)
                  else
                    input.byteslice(0, at) + input.byteslice((at + rng.rand(1..3))..).to_s
                  end
        end
        cuts = Array.new(3) { [rng.rand(0..input.bytesize)] } + [Array.new(rng.rand(1..6)) { rng.rand(0..input.bytesize) }]
        limits = [[nil, 1024, 1024], [rng.rand(0..20), rng.rand(0..10), rng.rand(0..20)]].sample(random: rng)
        assert_same_when_split(input, limits, cuts)
      end
    end
  end
end
