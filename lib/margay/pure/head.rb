# frozen_string_literal: true

require_relative "../errors"

module Margay
  module Pure
    # A response's head as the engine writes it (ext/margay/ruby/head.c's rules): the status
    # checked, the app's fields checked and written, then content-length or chunked, connection
    # and date added. Mixed into Engine (#head_finish reads its settings and drain flag).
    module Head
      REASONS = { 100 => "Continue", 101 => "Switching Protocols", 103 => "Early Hints", 200 => "OK",
                  201 => "Created", 202 => "Accepted", 204 => "No Content", 206 => "Partial Content",
                  301 => "Moved Permanently", 302 => "Found", 303 => "See Other", 304 => "Not Modified",
                  307 => "Temporary Redirect", 308 => "Permanent Redirect", 400 => "Bad Request",
                  401 => "Unauthorized", 403 => "Forbidden", 404 => "Not Found", 405 => "Method Not Allowed",
                  408 => "Request Timeout", 409 => "Conflict", 410 => "Gone", 411 => "Length Required",
                  413 => "Content Too Large", 414 => "URI Too Long", 415 => "Unsupported Media Type",
                  416 => "Range Not Satisfiable", 417 => "Expectation Failed", 422 => "Unprocessable Content",
                  429 => "Too Many Requests", 431 => "Request Header Fields Too Large",
                  500 => "Internal Server Error", 501 => "Not Implemented", 502 => "Bad Gateway",
                  503 => "Service Unavailable", 504 => "Gateway Timeout",
                  505 => "HTTP Version Not Supported" }.freeze
      TCHAR = /\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\z/
      # The status lines of the statuses above, ready to copy.
      STATUS_LINES = REASONS.to_h { |status, reason| [status, "HTTP/1.1 #{status} #{reason}\r\n".b.freeze] }.freeze
      # The usual response field names (Rack 3's lower case), each a valid token and not "rack.":
      # found here, a name skips the token check and the downcase.
      KNOWN_NAMES = %w[content-type content-length cache-control set-cookie location etag last-modified vary
                       content-encoding content-language content-disposition expires x-frame-options
                       x-content-type-options x-xss-protection referrer-policy strict-transport-security
                       content-security-policy x-request-id x-runtime access-control-allow-origin link
                       date connection transfer-encoding upgrade server].to_h { |n| [n.freeze, n.freeze] }.freeze
      CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/n

      # A head being built: +out+ the bytes so far, and what the app's fields said.
      Built = Struct.new(:out, :content_length, :has_te, :has_date, :has_upgrade, :app_close, :hijack, :protocol,
                         :strip_length, :chunked)

      private

      # Status < 200, 204 and 304 never carry a body.
      def bodyless?(status) = status < 200 || status == 204 || status == 304

      def check_status(status)
        raise InvalidResponse, "status must be an Integer, got #{status.inspect}" unless status.is_a?(Integer)
        raise InvalidResponse, "status #{status} is out of range" unless (100..999).cover?(status)

        status
      end

      # The status line and the app's fields. HTTP/1.1 also to 1.0 clients (RFC 9110 6.2).
      def head_begin(status, headers)
        raise InvalidResponse, "headers must be a Hash, got #{headers.class}" unless headers.is_a?(Hash)

        line = STATUS_LINES[status]
        h = Built.new(line ? line.dup : +"HTTP/1.1 #{status} \r\n".b, -1, false, false, false, false,
                      nil, nil, status < 200 || status == 204, false)
        headers.each { |name, value| head_field(h, name, value) }
        h
      end

      def head_field(built, name, value)
        case KNOWN_NAMES[name] || checked_name(built, name, value)
        when nil then return # a server-only field
        when "content-length" then return built.content_length = app_length(value)
        when "connection"
          built.app_close = true if (value.is_a?(Array) ? value.join(",") : value).to_s.include?("close")
          return # the server decides and writes connection
        when "date" then built.has_date = true
        when "upgrade" then built.has_upgrade = true
        when "transfer-encoding"
          return if built.strip_length

          built.has_te = true
        end
        return head_put(built, name, value) unless value.is_a?(Array)

        value.each { |v| head_put(built, name, v) }
      end

      # +name+ in lower case once checked; nil for a server-only field ("rack.*", noted in +built+).
      def checked_name(built, name, value)
        raise InvalidResponse, "header names must be Strings, got #{name.inspect}" unless name.is_a?(String)
        raise InvalidResponse, "empty header name" if name.empty?

        if name.start_with?("rack.") && name.size > 5
          built.hijack = value if name == "rack.hijack"
          built.protocol = value if name == "rack.protocol"
          return nil # server-only headers never reach the client
        end
        raise InvalidResponse, "invalid header name #{name.inspect}" unless name.match?(TCHAR)

        name.downcase
      end

      def head_put(built, name, value)
        raise InvalidResponse, "header #{name} value must be a String" unless value.is_a?(String)

        value = value.b unless value.ascii_only? # (no copy of the usual all-ASCII value)
        raise InvalidResponse, "header #{name} value contains a control character (CR, LF or NUL)" if value.match?(CONTROL)

        built.out << (name.ascii_only? ? name : name.b) << ": " << value << "\r\n"
      end

      def app_length(value)
        if value.is_a?(Array)
          raise InvalidResponse, "several content-length values: #{value.inspect}" unless value.size == 1

          value = value.first
        end
        unless value.is_a?(String) && value.match?(/\A\d{1,18}\z/)
          raise InvalidResponse, "invalid content-length #{value.inspect}"
        end

        value.to_i
      end

      # Framing, connection and date fields, then the empty line: the head's bytes.
      # +body_len+: the body's length, or -1 when unknown (streamed).
      def head_finish(conn, built, status, body_len)
        out = built.out
        unless built.strip_length
          length = built.content_length >= 0 ? built.content_length : body_len
          if length >= 0 && !built.has_te
            out << "content-length: #{length}\r\n" unless status == 304 && built.content_length.negative?
          elsif !built.has_te && !bodyless?(status) && conn.head.minor >= 1
            out << "transfer-encoding: chunked\r\n"
            built.chunked = true
          end
        end
        framed = bodyless?(status) || conn.head.method == "HEAD" || built.chunked || built.has_te ||
                 built.content_length >= 0 || body_len >= 0
        keep = conn.head.keep_alive && !conn.close && !built.app_close && framed && !@draining && !@stopping &&
               conn.requests + 1 < @cfg[:max_keepalive_requests] && status != 101
        conn.close = !keep
        if status != 101
          out << "connection: close\r\n" unless keep
          out << "connection: keep-alive\r\n" if keep && conn.head.minor.zero?
        else
          head_put(built, "upgrade", built.protocol) if !built.has_upgrade && built.protocol.is_a?(String)
          out << "connection: upgrade\r\n"
        end
        out << date_field unless built.has_date
        out << "\r\n"
      end

      # "date: ...\r\n", formatted once a second.
      def date_field
        second = Process.clock_gettime(Process::CLOCK_REALTIME, :second)
        cached = @date
        return cached[1] if cached && cached[0] == second

        (@date = [second, "date: #{Time.at(second).utc.strftime('%a, %d %b %Y %H:%M:%S GMT')}\r\n".b.freeze])[1]
      end

      # The fields of a 103 (no framing, no date).
      def hint_fields(headers)
        built = Built.new(+"".b, -1)
        headers.each { |name, value| head_field(built, name, value) }
        built.out
      end
    end
  end
end
