# frozen_string_literal: true

module Margay
  module Pure
    # The request head parser of the pure-Ruby engine: the C parser's rules
    # (ext/margay/http/parser.c, RFC 9112) on a whole head. #parse answers
    # nil (more bytes needed), an Integer status (a 4xx/5xx to send, then
    # close) or a Head.
    module Parser
      Head = Struct.new(:method, :target, :path, :query, :authority, :minor, :fields, :host,
                        :content_length, :chunked, :keep_alive, :expect_continue, :length)

      MAX_METHOD = 20
      TCHAR = "!#$%&'*+\\-.^_`|~0-9A-Za-z"
      TARGET = "!$&'()*+,\\-./0-9:;=?@A-Z\\[\\]_a-z~%"
      REQUEST_LINE = /\A([#{TCHAR}]+) ([#{TARGET}]+(?:#[#{TARGET}]*)?) HTTP\/(\d)\.(\d)\r\n/n
      # A field line: name, then the value with its leading OWS left out (its trailing OWS is cut
      # after the match: a lazy value before "[ \t]*\z" costs JRuby's regex engine a try per byte).
      # The value's class leaves out every control byte but HTAB.
      FIELD = /\A([#{TCHAR}]+):[ \t]*([\t\x20-\x7e\x80-\xff]*)\z/n
      TRAILING_OWS = /[ \t]+\z/n
      REGNAME = "A-Za-z0-9\\-._~!$&'()*+;="
      # uri-host [ ":" port ] (RFC 9110 7.2): an IP-literal, or a reg-name without ',' (a list of
      # hosts is a smuggling probe); absolute-form targets need a non-empty host.
      HOST = /\A(?:\[(?:[vV]\h+\.[#{REGNAME}:]+|[\h.]*:[\h:.]*)\]|(?:[#{REGNAME}]|%\h\h)*)(?::\d*)?\z/n
      # The usual Host (a name or IPv4 address, an optional port): a subset of HOST that JRuby's
      # regex engine matches in a third of HOST's time.
      PLAIN_HOST = /\A[A-Za-z0-9.\-]*(?::\d*)?\z/n
      NAMED_HOST = /\A(?:\[|(?:[#{REGNAME}]|%\h\h))/n
      QUOTED = /"(?:[\t\x20\x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t\x20-\x7e\x80-\xff])*"/n
      # One transfer-coding of a list: token *( OWS ";" OWS token BWS "=" BWS ( token / quoted-string ) ).
      CODING = /\G([#{TCHAR}]+)((?:[ \t]*;[ \t]*[#{TCHAR}]+[ \t]*=[ \t]*(?:[#{TCHAR}]+|#{QUOTED}))*)[ \t]*(?:,|\z)/n
      CRLF2 = "\r\n\r\n".b.freeze

      module_function

      # @param buf [String] binary bytes received so far on the connection
      # @param max_head [Integer] max_header_size (431 beyond)
      # @param max_target [Integer] max_request_target (414 beyond)
      # @param max_headers [Integer] max_headers (431 beyond)
      # @param methods [Array<String>, nil] supported_http_methods (501 for others)
      def parse(buf, max_head:, max_target:, max_headers:, methods: nil)
        # empty lines before the request line (RFC 9112 2.2)
        lead = buf.start_with?("\r\n") ? buf[/\A(?:\r\n)*/n].bytesize : 0
        stop = buf.index(CRLF2, lead)
        return early(buf, lead, max_head, max_target, max_headers, methods) if stop.nil? || stop + 4 > max_head

        request = judge(buf.byteslice(lead, stop + 2 - lead), max_target, max_headers, methods, stop + 4)
        request.is_a?(Head) ? semantics(request) : request
      end

      # The request line and field lines of +head+ (complete lines, CRLF-terminated): an error
      # status, or the Head (+length+: the bytes the whole head takes; nil while incomplete,
      # when the transfer codings are judged at its end).
      def judge(head, max_target, max_headers, methods, length)
        line = REQUEST_LINE.match(head)
        return line_error(head, max_target) unless line

        method, target, major, minor = line.captures
        return 501 if method.bytesize > MAX_METHOD
        return 414 if line.end(2) - line.begin(2) > max_target
        return 505 unless major == "1"
        return 501 if (methods && !methods.include?(method)) || method == "CONNECT"

        target = target.byteslice(0, target.index("#")) if target.include?("#")
        return 400 if target.empty?

        # positional: a keyword_init Struct builds a Hash per request on JRuby
        request = Head.new(method, target, nil, nil, nil, minor == "0" ? 0 : 1, [], nil, nil, false, nil, false, length)
        target_form(request) || fields(request, head.byteslice(line.end(0)..), max_headers, !length.nil?) || request
      end

      # No complete head yet: a status when the bytes so far are already wrong (each complete
      # line judged as the C parser judges it as it ends), or too many; else nil.
      def early(buf, lead, max_head, max_target, max_headers, methods)
        return 501 if buf.match?(/\A(?:\r\n)*[#{TCHAR}]{#{MAX_METHOD + 1}}/o)

        last = buf.rindex("\r\n")
        if last && last >= lead
          status = judge(buf.byteslice(lead, last + 2 - lead), max_target, max_headers, methods, nil)
          return status if status.is_a?(Integer)
        end
        return 431 if buf.bytesize >= max_head
        return 400 if buf.match?(/[\x00]|(?<!\r)\n|\r[^\n]/n)
        return 414 if !buf.include?("\r") && buf.bytesize > max_target + MAX_METHOD + 1

        nil
      end

      # A complete head whose request line does not match: the C parser's answer for it.
      def line_error(head, max_target)
        first = head.sub(/\A(?:\r\n)*/n, "").split("\r\n", 2).first.to_s
        method, target, = first.split(" ", 3)
        return 501 if method && method.match?(/\A[#{TCHAR}]{#{MAX_METHOD + 1}}/o)
        return 414 if target && target.bytesize >= max_target
        return 505 if first.match?(/ HTTP\/[02-9]\.\d\z/n)

        400
      end

      def target_form(request)
        target = request.target
        if target.start_with?("/")
          request.path, request.query = target.split("?", 2)
        elsif target == "*"
          return 400 unless request.method == "OPTIONS"

          request.path = "*"
        elsif (m = %r{\Ahttps?://([^/?]*)([^?]*)(?:\?(.*))?\z}ni.match(target))
          return 400 unless HOST.match?(m[1]) && NAMED_HOST.match?(m[1])

          request.authority = m[1]
          request.path = m[2].empty? ? "/" : m[2]
          request.query = m[3]
        else
          return 400
        end
        request.query ||= ""
        nil
      end

      def fields(request, block, max_headers, complete = true)
        te = nil
        block.split("\r\n").each do |line|
          return 400 if line.empty? || line.start_with?(" ", "\t")
          return 431 if request.fields.size >= max_headers

          m = FIELD.match(line)
          return 400 unless m

          value = m[2]
          value = value.sub(TRAILING_OWS, "") if value.end_with?(" ", "\t")
          request.fields << [m[1], value]
          case m[1].downcase
          when "host"
            return 400 if request.host || !(PLAIN_HOST.match?(value) || HOST.match?(value))

            request.host = value
          when "expect"
            next if request.minor.zero? || value.empty?
            return 417 unless value.casecmp?("100-continue")

            request.expect_continue = true
          when "content-length"
            return 400 if request.content_length || te || !value.match?(/\A\d+\z/)
            return 413 if value.sub(/\A0+/, "").size > 18

            request.content_length = value.to_i
          when "transfer-encoding"
            return 400 if request.minor.zero? || request.content_length

            te ||= []
            status = codings(value, te)
            return status if status
          end
        end
        transfer_encoding(request, te) if complete
      end

      # Append the codings of one Transfer-Encoding value to +list+ ([name, parameters?] pairs).
      # An error status, or nil.
      def codings(value, list)
        pos = 0
        here = 0
        loop do
          pos += 1 while value[pos] == " " || value[pos] == "\t" || value[pos] == ","
          break if pos >= value.bytesize

          m = CODING.match(value, pos)
          return 400 unless m&.begin(0) == pos

          list << [m[1].downcase, !m[2].empty?]
          here += 1
          pos = m.end(0)
        end
        return 400 if here.zero? || list.count { |name, _| name == "chunked" } > 1

        nil
      end

      def transfer_encoding(request, codings)
        return nil unless codings
        return 400 unless codings.last == ["chunked", false]
        return 501 if codings.size > 1

        request.chunked = true
        nil
      end

      def semantics(request)
        return 400 if request.minor == 1 && request.host.nil?

        close = keep = false
        request.fields.each do |name, value|
          next unless name.casecmp?("connection")

          value.split(",").each do |token|
            token = token.strip
            close ||= token.casecmp?("close")
            keep ||= token.casecmp?("keep-alive")
          end
        end
        request.keep_alive = !close && (request.minor == 1 || keep)
        request
      end
    end
  end
end
