# frozen_string_literal: true

module Margay
  class Server
    # Internal: the stream handed to a streaming body (`body.call(stream)`).
    # Writes go through the native engine (chunked framing when the length is
    # unknown); reads come from the request body, which is fully buffered.
    class Stream
      # For the response of +token+ on +engine+; +input+ is rack.input (or nil).
      def initialize(engine, token, input)
        @engine = engine
        @token = token
        @input = input
        @closed = false
      end

      # Read from the request body (IO#read's arguments); nil without one.
      # (No buffer argument is passed on when the caller gave none: Rack::Lint
      # rejects an explicit nil buffer.)
      def read(length = nil, buffer = nil)
        return nil unless @input

        buffer ? @input.read(length, buffer) : @input.read(length)
      end

      # Send +data+ (its to_s) to the client; returns the bytes written.
      def write(data)
        raise IOError, "closed stream" if @closed

        data = data.to_s
        @engine.stream_write(@token, data)
        data.bytesize
      end

      # Like #write; returns self.
      def <<(data)
        write(data)
        self
      end

      # Block until what was written has reached the socket.
      def flush
        @engine.flush(@token) unless @closed
        self
      end

      # A no-op: the request body needs no closing here.
      def close_read
        nil
      end

      # No more writes; the response ends when the body's #call returns.
      def close_write
        @closed = true
        nil
      end

      # Like #close_write.
      def close
        @closed = true
        nil
      end

      # True after #close or #close_write.
      def closed?
        @closed
      end
    end
  end
end
