# frozen_string_literal: true

module Margay
  module Pure
    # A chunked request body (RFC 9112 7.1) decoded as its bytes arrive. #feed
    # answers :more, :done (#body complete, #rest: the bytes after it) or an
    # error status (400, 413).
    class Chunked
      SIZE_LINE = /\A([0-9A-Fa-f]{1,16})((?:[ \t]*;[^\r\n]*)?)\r\n/n
      TRAILER_LINE = /\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n]*\r\n/n

      attr_reader :body, :rest

      # @param max_body [Integer, nil] max_body_size (413 beyond)
      # @param max_extensions [Integer] max_chunk_extensions: bytes of extensions allowed in all
      def initialize(max_body, max_extensions)
        @max_body = max_body
        @max_extensions = max_extensions
        @extensions = 0
        @pending = +"".b
        @body = +"".b
        @left = nil # bytes of the current chunk still to come (then its CRLF)
        @trailers = false
        @rest = nil
      end

      def feed(data)
        @pending << data
        loop do
          step = @trailers ? trailer : (@left ? data_part : size_line)
          return step unless step == :next
        end
      end

      private

      def size_line
        m = SIZE_LINE.match(@pending)
        return (@pending.bytesize > 1024 || @pending.match?(/\A[^0-9A-Fa-f]|\A\h*[^\h \t;\r]/n) ? 400 : :more) unless m

        @extensions += m[2].bytesize
        return 400 if @extensions > @max_extensions

        @pending = @pending.byteslice(m.end(0)..)
        size = m[1].to_i(16)
        return 413 if @max_body && @body.bytesize + size > @max_body

        size.zero? ? (@trailers = true) : (@left = size)
        :next
      end

      def data_part
        return :more if @pending.bytesize < @left + 2
        return 400 unless @pending.byteslice(@left, 2) == "\r\n"

        @body << @pending.byteslice(0, @left)
        @pending = @pending.byteslice(@left + 2..)
        @left = nil
        :next
      end

      def trailer
        if @pending.start_with?("\r\n")
          @rest = @pending.byteslice(2..)
          return :done
        end
        m = TRAILER_LINE.match(@pending)
        return (@pending.include?("\r\n") || @pending.bytesize > 8192 ? 400 : :more) unless m

        @pending = @pending.byteslice(m.end(0)..)
        :next
      end
    end
  end
end
