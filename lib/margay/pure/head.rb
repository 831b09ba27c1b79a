# frozen_string_literal: true

require_relative "../errors"

module Margay
  module Pure
    # A response's head as the engine writes it (ext/margay/ruby/head.c's rules): the status
    # checked, the app's fields checked and written, content-length and connection added.
    # Mixed into Engine (head_bytes reads its drain flag).
    module Head
      REASONS = { 100 => "Continue", 101 => "Switching Protocols", 103 => "Early Hints", 200 => "OK",
                  201 => "Created", 202 => "Accepted", 204 => "No Content", 206 => "Partial Content",
                  301 => "Moved Permanently", 302 => "Found", 303 => "See Other", 304 => "Not Modified",
                  307 => "Temporary Redirect", 308 => "Permanent Redirect", 400 => "Bad Request",
                  401 => "Unauthorized", 403 => "Forbidden", 404 => "Not Found", 405 => "Method Not Allowed",
                  408 => "Request Timeout", 409 => "Conflict", 410 => "Gone", 411 => "Length Required",
                  413 => "Content Too Large", 414 => "URI Too Long", 415 => "Unsupported Media Type",
                  417 => "Expectation Failed", 422 => "Unprocessable Content", 429 => "Too Many Requests",
                  431 => "Request Header Fields Too Large", 500 => "Internal Server Error",
                  501 => "Not Implemented", 502 => "Bad Gateway", 503 => "Service Unavailable",
                  504 => "Gateway Timeout", 505 => "HTTP Version Not Supported" }.freeze

      private

      # No body goes with +status+, or with any answer to a HEAD request.
      def no_body?(conn, status)
        status < 200 || status == 204 || status == 304 || conn.head.method == "HEAD"
      end

      def check_status(status)
        status = Integer(status)
        raise InvalidResponse, "status #{status} is not 100..999" unless (100..999).cover?(status)

        status
      rescue ArgumentError, TypeError
        raise InvalidResponse, "status #{status.inspect} is not an Integer"
      end

      def header?(headers, name) = headers.each_key.any? { |k| k.to_s.casecmp?(name) }

      def head_bytes(conn, status, headers, extra)
        version = conn.head.minor.zero? ? "HTTP/1.0" : "HTTP/1.1"
        keep = conn.head.keep_alive && !conn.close && !@draining
        conn.close = true if headers.any? { |k, v| k.to_s.casecmp?("connection") && v.to_s.casecmp?("close") }
        out = +"#{version} #{status} #{REASONS.fetch(status, 'Unknown')}\r\n#{fields(headers)}"
        extra&.each { |k, v| out << "#{k}: #{v}\r\n" }
        out << "connection: close\r\n" if (!keep || conn.close) && !header?(headers, "connection")
        out << "connection: keep-alive\r\n" if keep && !conn.close && conn.head.minor.zero?
        conn.close ||= !keep
        out << "\r\n"
        out.b
      end

      def fields(headers)
        out = +""
        headers.each do |name, value|
          name = name.to_s
          raise InvalidResponse, "header name #{name.inspect}" unless name.match?(/\A[!#$%&'*+\-.^_`|~0-9a-z]+\z/)
          next if name.start_with?("rack.")

          Array(value).each do |v|
            v.to_s.split("\n").each do |line|
              raise InvalidResponse, "header #{name}: a control character" if line.match?(/[\x00-\x08\x0a-\x1f\x7f]/)

              out << "#{name}: #{line}\r\n"
            end
          end
        end
        out
      end
    end
  end
end
