# frozen_string_literal: true

require "io/wait"
require "socket"
require_relative "../errors"
require_relative "hijack"

module Margay
  class Server
    # Internal: connection upgrades (WebSocket and the like) through a Rack 3
    # streaming body. The request's Upgrade tokens become env["rack.protocol"];
    # an app that answers 101 (or 2xx with a rack.protocol response header)
    # with a callable body gets the 101 head sent (its upgrade field and
    # `connection: upgrade`, no framing), then the connection leaves the
    # engine and the body's #call talks on the raw socket through an
    # Upgrade::Stream. The connection never returns to keep-alive: it closes
    # when #call returns.
    #
    # The call runs on the pool thread that served the request (as under
    # Puma), so it counts against max_threads while it runs. It cannot hold
    # that thread forever: a read waits at most +read_timeout+ (the server's
    # keepalive_timeout) for the client's next byte, a write at most
    # +write_timeout+ for the client to take bytes; either then closes the
    # stream and raises ClientGone. A graceful stop (Upgrade.stop_reading)
    # ends the reading side of every upgraded stream: a read returns end of
    # stream at once, the app may still write its goodbye (a WebSocket close
    # frame) and return; one still running at shutdown_timeout is interrupted
    # like any request.
    class Upgrade
      # The env key and response header (Rack::RACK_PROTOCOL from Rack 3.1 on).
      RACK_PROTOCOL = "rack.protocol"

      @lock = Mutex.new
      @open = {}.compare_by_identity # engine => the upgraded streams open on it

      # Graceful stop of the server of +engine+, called after Engine#stop: the
      # reading side of each of its upgraded streams ends now; one upgraded
      # later starts ended (#track asks the engine, under the same lock). The
      # engine holds the mark, not an ObjectSpace::WeakMap here: Ruby 3.1's
      # WeakMap has crash fixes after 3.1.2 and is the likely cause of a heap
      # corruption seen once under ASan (CHANGELOG). Returns how many were open.
      def self.stop_reading(engine)
        streams = @lock.synchronize { @open.fetch(engine, {}).keys }
        streams.each(&:end_reading)
        streams.size
      end

      # Keep +stream+ in the registry of +engine+ while the block runs.
      def self.track(engine, stream)
        stopping = @lock.synchronize do
          (@open[engine] ||= {}.compare_by_identity)[stream] = true
          engine.stopping?
        end
        stream.end_reading if stopping
        yield
      ensure
        @lock.synchronize do
          streams = @open[engine]
          streams&.delete(stream)
          @open.delete(engine) if streams&.empty?
        end
      end

      # The protocols the client asks to switch to (its Upgrade tokens, in its
      # order and spelling), or nil: an HTTP/1.1 request whose Connection
      # field lists the upgrade option (RFC 9110 7.8; an HTTP/1.0 Upgrade is
      # ignored).
      def self.protocols(env)
        upgrade = env["HTTP_UPGRADE"] or return nil
        connection = env["HTTP_CONNECTION"] or return nil
        return nil unless env["SERVER_PROTOCOL"] == "HTTP/1.1"
        return nil unless connection.split(",").any? { |option| option.strip.casecmp?("upgrade") }

        tokens = upgrade.split(",").map(&:strip).reject(&:empty?)
        tokens unless tokens.empty?
      end

      # Set env["rack.protocol"] when the request asks for an upgrade.
      def self.prepare(env)
        protocols = env.key?("HTTP_UPGRADE") && protocols(env)
        env[RACK_PROTOCOL] = protocols if protocols
      end

      # True when +status+/+headers+ with a callable +body+ switch protocols:
      # a 101, or a 2xx naming a rack.protocol the request (+env+) offered.
      def self.response?(status, headers, env)
        return false unless headers.is_a?(Hash)
        return true if status == 101

        headers.key?(RACK_PROTOCOL) && env.key?(RACK_PROTOCOL) && status.is_a?(Integer) && status.between?(200, 299)
      end

      # Send the 101 head for the response of +token+, hand the socket to
      # +body+.call and close it when the call returns. Returns nil (there is
      # never a next request on this connection).
      def self.serve(engine, token, headers, body, read_timeout:, write_timeout:)
        engine.stream_start(token, 101, headers)
        engine.flush(token)
        stream = Stream.new(Hijack.take(engine, token), read_timeout: read_timeout, write_timeout: write_timeout)
        begin
          track(engine, stream) { body.call(stream) }
        ensure
          stream.close
        end
        nil
      end

      # IO's reading methods over the includer's read_some(maxlen) (up to maxlen bytes, waiting
      # for one; nil at end of stream): Upgrade::Stream's and Tunnel's.
      module Reading
        # IO#read: +length+ bytes (fewer at end of stream, nil there when
        # length > 0), or everything until the client closes when +length+ is nil.
        def read(length = nil, buffer = nil)
          raise ArgumentError, "negative length #{length} given" if length&.negative?

          data = +"".b
          while length.nil? || data.bytesize < length
            chunk = read_some(length ? [length - data.bytesize, 65_536].min : 65_536)
            break if chunk.nil?

            data << chunk
          end
          return nil if data.empty? && length&.positive?

          buffer ? buffer.replace(data) : data
        end

        # IO#readpartial: what the client sent, up to +maxlen+ bytes, waiting
        # for at least one; EOFError when it closed.
        def readpartial(maxlen, buffer = nil)
          data = read_some(maxlen) or raise EOFError, "end of file reached"
          buffer ? buffer.replace(data) : data
        end
      end

      # The stream an upgraded streaming body talks on: the raw connection
      # (bytes the client sent right after its request come first), with
      # IO's semantics and bounded waits. Writes from several threads do not
      # interleave.
      class Stream
        include Reading

        # +io+: the hijacked socket; waits are bounded by the timeouts (seconds).
        def initialize(io, read_timeout:, write_timeout:)
          @io = io
          @read_timeout = read_timeout
          @write_timeout = write_timeout
          @write_lock = Mutex.new
        end

        # Send all of +data+ (its to_s); returns the bytes written.
        def write(data)
          data = data.to_s
          @write_lock.synchronize { write_all(data.b) }
          data.bytesize
        end

        # Like #write; returns self.
        def <<(data)
          write(data)
          self
        end

        # Writes are not buffered here: a no-op, returns self.
        def flush
          self
        end

        # Shut down the reading side (shutdown(2)).
        def close_read
          @io.close_read unless @io.closed?
          nil
        end

        # Shut down the writing side (the client reads end of stream).
        def close_write
          @io.close_write unless @io.closed?
          nil
        end

        # Close the connection.
        def close
          @io.close unless @io.closed?
          nil
        end

        # True once closed.
        def closed?
          @io.closed?
        end

        # The server's graceful stop: reads return end of stream (shutdown(2)
        # of the reading side, which also wakes a read waiting now); writes go on.
        def end_reading
          @reading_ended = true
          @io.shutdown(Socket::SHUT_RD) unless @io.closed?
        rescue IOError, SystemCallError
          nil
        end

        private

        # Up to +maxlen+ bytes, nil at end of stream.
        def read_some(maxlen)
          loop do
            data = @io.read_nonblock(maxlen, exception: false)
            return data unless data == :wait_readable

            next if @io.wait_readable(@read_timeout)

            gone("no data from the client for #{@read_timeout}s")
          end
        rescue Errno::ECONNRESET, Errno::ETIMEDOUT
          nil
        rescue IOError # JRuby's reads after shutdown(SHUT_RD): "not opened for reading"
          raise unless @reading_ended && !@io.closed?

          nil
        end

        def write_all(data)
          until data.empty?
            written = @io.write_nonblock(data, exception: false)
            if written == :wait_writable
              next if @io.wait_writable(@write_timeout)

              gone("write timeout: the client stopped reading for #{@write_timeout}s")
            end
            data = data.byteslice(written..)
          end
        rescue Errno::EPIPE, Errno::ECONNRESET
          gone("client went away")
        end

        def gone(message)
          close
          raise ClientGone, message
        end
      end
    end
  end
end
