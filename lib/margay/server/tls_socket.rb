# frozen_string_literal: true

require "io/wait"
require "socket"

module Margay
  class Server
    # Internal: what rack.hijack hands the app on a TLS connection: an IO-like object over the
    # connection's TLS session (Native::TLSSession, the engine's OpenSSL session) and its socket.
    # The app reads and writes plain text; the records are the session's. It has the methods a
    # hijacking app, Server::Upgrade::Stream and Puma's MiniSSL::Socket users call: read,
    # readpartial, read_nonblock, write, write_nonblock, <<, flush, wait_readable,
    # wait_writable, close, close_write, to_io. A poller watching #to_io (nio4r) is not told of
    # input the session already read from the socket (records read ahead with the request,
    # decrypted bytes; #wait_readable is); WebSocket clients wait for each answer, so this
    # matters only to protocols that do not.
    class TLSSocket
      # @param session [Native::TLSSession] @param fd [Integer] its socket
      # @param buffered [String] plain text read past the request (given back first)
      def initialize(session, fd, buffered)
        @session = session
        @io = Socket.for_fd(fd)
        @io.autoclose = true
        @buffer = buffered.empty? ? nil : buffered.b
      end

      # The socket (for IO.select, a poller, addresses); never read or write it directly.
      def to_io = @io

      def fileno = @io.fileno

      def remote_address = @io.remote_address

      def local_address = @io.local_address

      def peeraddr(...) = @io.peeraddr(...)

      def sync = true

      def sync=(_value)
        nil
      end

      def flush = self

      # Plain text, at most +maxlen+ bytes, without waiting: nil (or EOFError) at the end,
      # :wait_readable/:wait_writable (or IO::WaitReadable/WaitWritable) when nothing is ready.
      def read_nonblock(maxlen, buffer = nil, exception: true)
        data = take_buffered(maxlen) || @session.read_nonblock(maxlen)
        case data
        when String then buffer ? buffer.replace(data) : data
        when nil then exception ? raise(EOFError, "end of file reached") : nil
        else would_block(data, exception)
        end
      end

      # Writes what one record takes of +data+; after a wait, the same bytes must come first.
      def write_nonblock(data, exception: true)
        result = @session.write_nonblock(data.to_s.b)
        result.is_a?(Integer) ? result : would_block(result, exception)
      end

      def readpartial(maxlen, buffer = nil)
        loop do
          data = read_nonblock(maxlen, buffer, exception: false)
          raise EOFError, "end of file reached" if data.nil?
          return data if data.is_a?(String)

          data == :wait_writable ? @io.wait_writable : @io.wait_readable
        end
      end

      # Like IO#read: everything up to the end, or +length+ bytes (nil at the end).
      def read(length = nil, buffer = nil)
        data = +"".b
        while length.nil? || data.bytesize < length
          begin
            data << readpartial(length ? length - data.bytesize : 65_536)
          rescue EOFError
            break
          end
        end
        return nil if data.empty? && length&.positive?

        buffer ? buffer.replace(data) : data
      end

      # Writes all of +strings+, waiting for the socket; returns the bytes written.
      def write(*strings)
        strings.sum do |string|
          data = string.to_s.b
          total = data.bytesize
          until data.empty?
            result = write_nonblock(data, exception: false)
            if result.is_a?(Integer) then data = data.byteslice(result..)
            elsif result == :wait_readable then @io.wait_readable
            else @io.wait_writable
            end
          end
          total
        end
      end

      def <<(data)
        write(data)
        self
      end

      # Ready to read: plain text already here, or the socket readable. Returns self or nil.
      def wait_readable(timeout = nil)
        return self if @buffer || @session.pending?

        @io.wait_readable(timeout) && self
      end

      def wait_writable(timeout = nil)
        @io.wait_writable(timeout) && self
      end

      # No more writes: a close_notify, then the socket's write side shut.
      def close_write
        @session.close_notify unless @session.closed?
        @io.close_write unless @io.closed?
        nil
      end

      def close_read
        @io.close_read unless @io.closed?
        nil
      end

      def shutdown(how = Socket::SHUT_RDWR)
        @session.close_notify if how != Socket::SHUT_RD && !@session.closed?
        @io.shutdown(how)
      end

      # A close_notify (best effort, never waits), then the session and the socket are gone.
      def close
        return if closed?

        begin
          @session.close_notify
        ensure
          @session.close
          @io.close
        end
        nil
      end

      def closed? = @io.closed?

      private

      def take_buffered(maxlen)
        return nil unless @buffer

        data = @buffer.byteslice(0, maxlen)
        @buffer = @buffer.bytesize > maxlen ? @buffer.byteslice(maxlen..) : nil
        data
      end

      def would_block(what, exception)
        return what unless exception

        raise what == :wait_writable ? IO::EAGAINWaitWritable : IO::EAGAINWaitReadable, "TLS session would block"
      end
    end
  end
end
