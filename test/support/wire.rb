# frozen_string_literal: true

require "socket"
require "margay/clock"

module Margay
  # Test support (internal): the suite's one HTTP/1.1 response reader, strict,
  # over a raw socket (TestHelper#read_response is built on it). It keeps every
  # byte it read and tells a truncated body from a complete one.
  module Wire
    # One parsed response. +fields+ keeps the header lines in order as
    # [name, value] pairs; +headers+ maps the lowercased name to the values
    # joined with ", ". +complete+ is false when the body was cut short.
    Response = Struct.new(:version, :status, :reason, :fields, :headers, :body, :complete, :raw,
                          keyword_init: true) do
      def [](name)
        headers[name.downcase]
      end

      def interim?
        status < 200
      end

      # True when the connection header lists +token+ (case-insensitive).
      def connection?(token)
        (self["connection"] || "").split(",").any? { |t| t.strip.casecmp?(token) }
      end
    end

    # Raised when the bytes on the wire are not an HTTP/1.1 response at all.
    class ProtocolError < StandardError; end

    # Raised when the peer sends nothing for +timeout+ seconds mid-response.
    class Timeout < StandardError; end

    # A client connection with a read buffer.
    class Client
      attr_reader :sock, :transcript, :responses

      # Connect to 127.0.0.1:+port+. +timeout+ bounds every wait for a byte.
      def self.open(port, host: "127.0.0.1", timeout: 5)
        new(TCPSocket.new(host, port), timeout: timeout)
      end

      # +buffered+: read ahead 64 KiB at a time (fast: a corpus of a few
      # hundred exchanges stays quick, but the bytes after a response stay in
      # this client). Unbuffered, it never reads past the response it was
      # asked for (lines byte by byte), so the socket can be read directly or
      # by another Client afterwards.
      def initialize(sock, timeout: 5, buffered: true)
        @sock = sock
        @timeout = timeout
        @buffered = buffered
        @buf = "".b
        @eof = false
        @transcript = "".b # every byte received, for failure messages and byte checks
        @responses = []    # every response parsed, in order
      end

      def write(bytes)
        @sock.write(bytes)
      rescue Errno::EPIPE, Errno::ECONNRESET
        nil # the server may close early on a rejected request; the read side tells what happened
      end

      def close
        @sock.close unless @sock.closed?
      end

      # Read one response (interim or final). Returns nil on a clean EOF
      # before its first byte. +head+: the request was HEAD (no body follows).
      def read_response(head: false)
        start = @transcript.bytesize - @buf.bytesize
        line = read_line
        return nil if line.nil?

        m = line.match(%r{\A(HTTP/\d\.\d) (\d{3})(?: ([^\r\n]*))?\r\n\z}n)
        raise ProtocolError, "not a status line: #{line.inspect}" unless m

        version = m[1]
        status = m[2].to_i
        fields = []
        loop do
          field = read_line
          raise ProtocolError, "EOF inside the response head" if field.nil?
          break if field == "\r\n"

          name, value = field.chomp("\r\n").split(":", 2)
          raise ProtocolError, "malformed response field: #{field.inspect}" if value.nil?

          fields << [name, value.strip]
        end
        headers = {}
        fields.each do |name, value|
          key = name.downcase
          headers[key] = headers.key?(key) ? "#{headers[key]}, #{value}" : value
        end
        body, complete = read_body(status, headers, head)
        raw = @transcript.byteslice(start, @transcript.bytesize - @buf.bytesize - start)
        res = Response.new(version: version, status: status, reason: m[3], fields: fields, headers: headers,
                           body: body, complete: complete, raw: raw)
        @responses << res
        res
      end

      # Read responses until a final one (status >= 200); returns [interims, final].
      def read_final(head: false)
        interims = []
        loop do
          res = read_response(head: head)
          return [interims, nil] if res.nil?
          return [interims, res] unless res.interim?

          interims << res
        end
      end

      # Wait up to +timeout+ for the server to close. Returns [state, bytes] where
      # state is :eof, :reset or :open and bytes is whatever arrived meanwhile.
      def wait_close(timeout)
        extra = @buf.dup
        @buf.clear
        deadline = Margay::Clock.now + timeout
        until @eof
          left = deadline - Margay::Clock.now
          return [:open, extra] if left <= 0
          return [:open, extra] unless @sock.wait_readable(left)

          chunk = @sock.read_nonblock(65_536, exception: false)
          case chunk
          when nil then @eof = true
          when :wait_readable then next
          else
            @transcript << chunk
            extra << chunk
          end
        end
        [:eof, extra]
      rescue Errno::ECONNRESET
        [:reset, extra]
      end

      private

      def read_body(status, headers, head)
        return ["".b, true] if head || status < 200 || status == 204 || status == 304

        if headers["transfer-encoding"]
          read_chunked
        elsif headers["content-length"]
          want = Integer(headers["content-length"], 10)
          body = read_bytes(want)
          [body, body.bytesize == want]
        else
          [read_to_eof, true]
        end
      end

      def read_chunked
        body = "".b
        loop do
          line = read_line
          return [body, false] if line.nil?

          size = line[/\A\h+/]
          raise ProtocolError, "bad chunk size line: #{line.inspect}" unless size

          size = size.to_i(16)
          if size.zero?
            loop do # trailer section
              t = read_line
              return [body, false] if t.nil?
              return [body, true] if t == "\r\n"
            end
          end
          data = read_bytes(size)
          body << data
          return [body, false] if data.bytesize < size
          return [body, false] unless read_bytes(2) == "\r\n"
        end
      end

      # One line including its "\r\n" (or "\n"), nil at EOF before any byte;
      # at EOF mid-line returns the partial line.
      def read_line
        i = @buf.index("\n")
        i = @buf.index("\n") while i.nil? && fill(1)
        if i
          @buf.slice!(0, i + 1)
        elsif @buf.empty?
          nil
        else
          @buf.slice!(0, @buf.bytesize)
        end
      end

      def read_bytes(count)
        fill(count - @buf.bytesize) while @buf.bytesize < count && !@eof
        @buf.slice!(0, count)
      end

      def read_to_eof
        nil while fill(65_536)
        @buf.slice!(0, @buf.bytesize)
      end

      # Read more bytes into the buffer: up to +wanted+ unbuffered. False at
      # EOF; raises Timeout.
      def fill(wanted)
        return false if @eof

        loop do
          raise Timeout, "no byte from the server for #{@timeout} s" unless @sock.wait_readable(@timeout)

          chunk = @sock.read_nonblock(@buffered ? 65_536 : wanted, exception: false)
          next if chunk == :wait_readable

          if chunk.nil?
            @eof = true
            return false
          end
          @transcript << chunk
          @buf << chunk
          return true
        end
      rescue Errno::ECONNRESET
        @eof = true
        false
      end
    end
  end
end
