# frozen_string_literal: true

require "resolv"

module Margay
  module Pure
    # The PROXY protocol v1 line a connection starts with, and the last address of a forwarding
    # field: ext/margay/http/proxy.c's rules. The line is judged as it arrives and is never
    # longer than MAX bytes, so a peer sending anything else costs at most that before the close.
    module Proxy
      MAX = 107
      PORT = /\A(?:0|[1-9]\d{0,4})\z/

      module_function

      # +buf+: the connection's first bytes. -> 0 (more bytes needed), -1 (not a valid line:
      # close unanswered) or [the line's length, the source address ("" for UNKNOWN)].
      def parse(buf)
        n = [buf.bytesize, MAX].min
        head = buf.byteslice(0, n)
        return -1 unless "PROXY ".start_with?(head.byteslice(0, 6))

        cr = head.index("\r") || n
        return -1 if head.byteslice(0, cr).match?(/[^\x20-\x7e]/n) # a bare LF, a control or non-ASCII
        return -1 if n > 6 && !protocol?(head.byteslice(6, cr - 6))
        return (buf.bytesize >= MAX ? -1 : 0) if cr >= n - 1 # the CR, or its LF, still to come
        return -1 unless head.getbyte(cr + 1) == 10

        addr = source(head.byteslice(6, cr - 6)) or return -1
        [cr + 2, addr]
      end

      # The last address of a forwarding field's value (the one the nearest proxy added), or nil.
      def forwarded_last(value)
        last = value.split(/[ \t,]+/).reject(&:empty?).last or return nil
        address?(last.include?(":") ? 6 : 4, last) ? last : nil
      end

      def protocol?(rest)
        %w[TCP4\  TCP6\  UNKNOWN].any? { |word| rest.start_with?(word) || word.start_with?(rest) }
      end

      # The source address of "TCP4 src dst sport dport", "" for UNKNOWN, nil when invalid.
      def source(rest)
        if rest.start_with?("UNKNOWN")
          return rest.size == 7 || rest[7] == " " ? "" : nil
        end

        family = rest[3] == "4" ? 4 : 6
        fields = rest.byteslice(5..).split(/ /, -1)
        return nil unless fields.size == 4 && address?(family, fields[0]) && address?(family, fields[1]) &&
                          fields[2..].all? { |p| p.match?(PORT) && p.to_i <= 65_535 }

        fields[0]
      end

      def address?(family, text)
        return false if text.empty? || text.bytesize >= 46

        (family == 4 ? Resolv::IPv4::Regex : Resolv::IPv6::Regex).match?(text)
      end
    end
  end
end
