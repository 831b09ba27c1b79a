# frozen_string_literal: true

module Margay
  # Internal: the stream handed to a streaming body (`body.call(stream)`).
  # Writes go through the native engine (chunked framing when the length is
  # unknown); reads come from the request body, which is fully buffered.
  class Stream
    def initialize(engine, token, input)
      @engine = engine
      @token = token
      @input = input
      @closed = false
    end

    def read(length = nil, buffer = nil)
      @input ? @input.read(length, buffer) : nil
    end

    def write(data)
      raise IOError, "closed stream" if @closed

      data = data.to_s
      @engine.stream_write(@token, data)
      data.bytesize
    end

    def <<(data)
      write(data)
      self
    end

    def flush
      @engine.flush(@token) unless @closed
      self
    end

    def close_read
      nil
    end

    def close_write
      @closed = true
      nil
    end

    def close
      @closed = true
      nil
    end

    def closed?
      @closed
    end
  end
end
