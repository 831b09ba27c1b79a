# frozen_string_literal: true

require_relative "../errors"

module Margay
  module Pure
    # The Engine contract's response methods for a request's token: the whole response, a file,
    # early hints, a streamed body. The pool thread that holds the request writes it itself
    # (Engine#write: blocking, bounded by write_timeout), then Engine#finish keeps the connection
    # alive, continues with a pipelined request or closes it. Mixed into Engine.
    module Respond
      # -> a token to continue with (a pipelined request is buffered), or nil; false (nothing
      # sent) when +headers+ has a rack.hijack field: the caller hijacks
      def respond(token, status, headers, body)
        conn = held(token)
        status = check_status(status)
        raise InvalidResponse, "body must be an Array" unless body.is_a?(Array)

        bad = body.index { |part| !part.is_a?(String) }
        built = head_begin(status, headers)
        return false if built.hijack # the caller hijacks; the body is ignored

        raise InvalidResponse, "body parts must be Strings, got #{body[bad].class}" if bad

        length = body.sum(&:bytesize)
        send_body = conn.head.method != "HEAD" && !bodyless?(status)
        if built.content_length >= 0 && send_body && !built.has_te && built.content_length != length
          raise InvalidResponse, "content-length #{built.content_length} does not match the body's #{length} bytes"
        end

        out = head_finish(conn, built, status, bodyless?(status) || built.has_te ? -1 : length)
        body.each { |part| out << binary(part) } if send_body
        timing_done(conn)
        write(conn, out)
        finish(token, conn)
      end

      # -> like #respond; false if the file cannot be opened (or its length is not the app's)
      def respond_file(token, status, headers, path)
        file = File.open(path, "rb") rescue (return false) # rubocop:disable Style/RescueModifier
        begin
          return false unless file.stat.file?

          conn = held(token)
          status = check_status(status)
          built = head_begin(status, headers)
          return false if built.has_te || (built.content_length >= 0 && built.content_length != file.size)

          timing_done(conn)
          write(conn, head_finish(conn, built, status, bodyless?(status) ? -1 : file.size))
          if conn.head.method != "HEAD" && !bodyless?(status)
            while (chunk = file.read(65_536))
              write(conn, chunk)
            end
          end
          finish(token, conn)
        ensure
          file.close
        end
      end

      # A 103 response before the final one (HTTP/1.1 only): true when sent.
      def early_hints(token, headers)
        conn = held(token)
        return false if conn.head.minor.zero? || conn.started

        write(conn, "HTTP/1.1 103 Early Hints\r\n#{hint_fields(headers)}\r\n".b)
        true
      end

      def response_started?(token) = held(token).started ? true : false

      # The head of a response of unknown length; chunked on HTTP/1.1, close-delimited on 1.0.
      def stream_start(token, status, headers)
        conn = held(token)
        status = check_status(status)
        built = head_begin(status, headers)
        if built.hijack
          conn.close = true    # the app takes the socket after the head ...
          built.has_te = true  # ... and frames its bytes itself: no content-length or chunked
        end
        out = head_finish(conn, built, status, built.hijack || bodyless?(status) ? -1 : built.content_length)
        conn.stream = built.chunked && conn.head.method != "HEAD" ? :chunked : :raw
        conn.left = conn.head.method == "HEAD" || bodyless?(status) ? 0 : built.content_length
        write(conn, out)
        built.hijack
      end

      def stream_write(token, string)
        conn = held(token)
        return if string.empty? || conn.head.method == "HEAD"

        if conn.left >= 0
          if string.bytesize > conn.left
            raise InvalidResponse, "body is longer than its content-length (#{string.bytesize - conn.left} more bytes)"
          end

          conn.left -= string.bytesize
        end
        write(conn, conn.stream == :chunked ? "#{string.bytesize.to_s(16)}\r\n#{string.b}\r\n".b : string.b)
      end

      def stream_finish(token)
        conn = held(token)
        timing_done(conn)
        write(conn, "0\r\n\r\n".b) if conn.stream == :chunked
        conn.close = true if conn.left.to_i.positive? # fewer bytes than announced: only closing frames it
        finish(token, conn)
      end

      # Writes are not queued: every write returned once the socket took it.
      def flush(token) = held(token) && nil

      private

      # +string+ as bytes to append to a binary buffer: copied only when it is not ASCII or
      # binary already.
      def binary(string) = string.encoding == Encoding::BINARY || string.ascii_only? ? string : string.b
    end
  end
end
