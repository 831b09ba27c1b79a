# frozen_string_literal: true

module Margay
  module Pure
    # A chunked request body (RFC 9112 7.1) decoded as its bytes arrive, with
    # ext/margay/http/chunked.c's state machine: each framing byte is judged in
    # the same state wherever the input was split, chunk data is copied in bulk.
    # #feed answers :more, :done (#body complete, #rest: the bytes after it) or
    # an error status (400, 413, 431).
    class Chunked
      MAX_SIZE_DIGITS = 32 # leading zeros included
      TCHAR = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".bytes.freeze
      IS_TCHAR = Array.new(256) { |b| TCHAR.include?(b) }.freeze
      IS_HEX = Array.new(256) { |b| b.chr.match?(/\h/) }.freeze
      IS_FIELD = Array.new(256) { |b| (0x21..0x7e).cover?(b) || b >= 0x80 }.freeze # VCHAR / obs-text
      IS_QDTEXT = Array.new(256) { |b| b == 9 || b == 32 || b >= 0x80 || (IS_FIELD[b] && b != 34 && b != 92) }.freeze
      OWS = [32, 9].freeze
      CR = 13
      LF = 10
      # The states that take one byte only: that byte, and the state after it.
      FIXED = { data_cr: [CR, :data_lf], data_lf: [LF, :size0], trl_lf: [LF, :trl0], end_lf: [LF, :done] }.freeze

      attr_reader :body, :rest

      # @param max_body [Integer, nil] max_body_size (413 beyond)
      # @param max_extensions [Integer] max_chunk_extensions: bytes of extensions allowed in all
      # @param max_trailer [Integer] bytes of trailer fields allowed (431 beyond)
      def initialize(max_body, max_extensions, max_trailer = 65_536)
        @max_body = max_body || Float::INFINITY
        @max_ext = max_extensions
        @max_trailer = max_trailer
        @ext_used = @trailer_used = @digits = @remaining = 0
        @state = :size0
        @body = +"".b
        @rest = nil
      end

      # @param data [String] the next bytes of the connection (binary)
      def feed(data)
        return @state if @state.is_a?(Integer)

        i = 0
        len = data.bytesize
        while i < len
          if @state == :data
            n = [len - i, @remaining].min
            @body << data.byteslice(i, n)
            i += n
            @remaining -= n
            @state = :data_cr if @remaining.zero?
            next
          end
          result = step(data.getbyte(i))
          i += 1
          if result == :done
            @rest = data.byteslice(i..)
            return :done
          end
          return @state = result if result.is_a?(Integer)
        end
        :more
      end

      private

      # Judge one framing byte in the current state: nil, :done or an error status.
      def step(byte) # rubocop:disable Metrics/CyclomaticComplexity -- one branch per state, as chunked.c
        state = @state
        return 400 if %i[ext_ws ext_name0 ext_name ext_namews ext_val0 ext_val ext_qs ext_qsesc ext_end]
                      .include?(state) && byte != CR && (@ext_used += 1) > @max_ext
        return 431 if %i[trl_name trl_val trl_lf].include?(state) && (@trailer_used += 1) > @max_trailer

        case state
        when :size0, :size
          if IS_HEX[byte]
            return 400 if (@digits += 1) > MAX_SIZE_DIGITS
            return 400 if (@remaining >> 56).positive? # a 16th significant hex digit

            @remaining = (@remaining << 4) | byte.chr.to_i(16)
            @state = :size
            return
          end
          return 400 if state == :size0
          return 413 if @remaining > @max_body - @body.bytesize
          return 400 if byte != CR && (@ext_used += 1) > @max_ext

          after_value(byte)
        when :ext_ws
          return if OWS.include?(byte)
          return 400 unless byte == 59 # ;

          @state = :ext_name0
        when :ext_name0
          return if OWS.include?(byte)
          return 400 unless IS_TCHAR[byte]

          @state = :ext_name
        when :ext_name
          return if IS_TCHAR[byte]
          return @state = :ext_val0 if byte == 61 # =
          return @state = :ext_namews if OWS.include?(byte)

          after_value(byte)
        when :ext_namews
          return if OWS.include?(byte)
          return @state = :ext_name0 if byte == 59
          return @state = :ext_val0 if byte == 61

          400
        when :ext_val0
          return if OWS.include?(byte)
          return @state = :ext_val if IS_TCHAR[byte]
          return @state = :ext_qs if byte == 34 # "

          400
        when :ext_val
          return if IS_TCHAR[byte]

          after_value(byte)
        when :ext_qs
          return @state = :ext_end if byte == 34
          return @state = :ext_qsesc if byte == 92 # \
          return if IS_QDTEXT[byte]

          400
        when :ext_qsesc
          return 400 unless OWS.include?(byte) || IS_FIELD[byte]

          @state = :ext_qs
        when :ext_end then after_value(byte)
        when :size_lf
          return 400 unless byte == LF

          @state = @remaining.positive? ? :data : :trl0
          @digits = 0
          nil
        when :data_cr, :data_lf, :trl_lf, :end_lf
          want, following = FIXED.fetch(state)
          return 400 unless byte == want

          @state = following
          following == :done ? :done : nil
        when :trl0
          return @state = :end_lf if byte == CR
          return 400 unless IS_TCHAR[byte] # empty name, obs-fold, bare LF, ...
          return 431 if (@trailer_used += 1) > @max_trailer

          @state = :trl_name
        when :trl_name
          return @state = :trl_val if byte == 58 # :
          return 400 unless IS_TCHAR[byte]
        when :trl_val
          return @state = :trl_lf if byte == CR
          return 400 unless IS_FIELD[byte] || OWS.include?(byte)
        end
      end

      # What may follow a size, an ext-name or an ext-value.
      def after_value(byte)
        if byte == CR then @state = :size_lf
        elsif byte == 59 then @state = :ext_name0
        elsif OWS.include?(byte) then @state = :ext_ws
        else
          return 400
        end
        nil
      end
    end
  end
end
