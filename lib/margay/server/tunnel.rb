# frozen_string_literal: true

require_relative "../clock"
require_relative "../errors"
require_relative "stream"
require_relative "upgrade"

module Margay
  class Server
    # Internal: an HTTP/2 extended CONNECT (RFC 8441: :method CONNECT with :protocol, a WebSocket
    # over one stream), on a bind with extended_connect=true. The engine hands the request to the
    # app at the end of its headers, with env["rack.protocol"] from :protocol; an app answering
    # with a streaming body (any 2xx, or 101 as it would on HTTP/1.1: sent as 200) gets a Tunnel:
    # its reads take the DATA the client sends on the stream, its writes go out as the response's
    # DATA (as a Stream's), both directions at once. The stream's window bounds what the client
    # sends ahead of the app's reads. The stream ends when #call returns (or at #close_write); the
    # connection's other streams go on. A read waits at most read_timeout, as an upgraded
    # HTTP/1.1 connection's (Upgrade); a graceful stop ends the reading side.
    class Tunnel < Stream
      include Upgrade::Reading

      # Whether the request of +token+ (+env+) is an extended CONNECT on HTTP/2.
      def self.request?(token, env)
        token.negative? && env["REQUEST_METHOD"] == "CONNECT" && env.key?(Upgrade::RACK_PROTOCOL)
      end

      # Send the head (a 101 becomes 200; the rack.protocol response header is not sent), run
      # +body+.call with a Tunnel, end the stream when it returns. Returns nil. (Writes are bounded
      # by the engine's write_timeout, as any streamed body's.)
      def self.serve(engine, token, status, headers, body, read_timeout:, **)
        headers = headers.reject { |name, _| name == Upgrade::RACK_PROTOCOL }
        engine.stream_start(token, status == 101 ? 200 : status, headers)
        tunnel = new(engine, token, read_timeout: read_timeout)
        Upgrade.track(engine, tunnel) { body.call(tunnel) }
        engine.stream_finish(token)
        nil
      end

      # For the stream of +token+ on +engine+; a read waits at most +read_timeout+ seconds.
      def initialize(engine, token, read_timeout:)
        super(engine, token, nil)
        @read_timeout = read_timeout
        @ended = false # the client ended its side, or the server stops
      end

      # Reads return end of stream from here.
      def close_read
        @ended = true
        nil
      end

      # End the response (END_STREAM); the client may still send.
      def close_write
        @engine.stream_finish(@token) unless @closed
        super
      end

      # Both.
      def close
        close_read
        close_write
      end

      # The server's graceful stop (Upgrade.stop_reading): reads return end of stream.
      def end_reading
        @ended = true
      end

      private

      # Up to +maxlen+ bytes, nil at end of stream.
      def read_some(maxlen)
        deadline = Clock.now + @read_timeout
        loop do
          return nil if @ended

          data = @engine.tunnel_read(@token, maxlen)
          return data if data
          return nil if data.nil?
          next if Clock.now < deadline

          @engine.abort(@token)
          raise ClientGone, "no data from the client for #{@read_timeout}s"
        end
      end
    end
  end
end
