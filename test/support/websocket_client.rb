# frozen_string_literal: true

require "socket"
require "websocket/driver"

module Margay
  # A real WebSocket client for the tests: websocket-driver's client (the
  # handshake, its Sec-WebSocket-Accept check, masked frames) over a plain
  # TCPSocket, or over TLS (wss://) with +tls+, an OpenSSL::SSL::SSLContext.
  # Everything it does waits at most +timeout+ seconds.
  class WebSocketClient
    # The ws:// URL the driver puts in its handshake.
    attr_reader :url

    # The driver (its protocol, state...).
    attr_reader :driver

    # Connect to 127.0.0.1:+port+ and send the handshake for +path+.
    # +protocols+: Sec-WebSocket-Protocol values to offer.
    def initialize(port, path = "/", protocols: nil, timeout: 5, tls: nil)
      @url = "#{tls ? 'wss' : 'ws'}://127.0.0.1:#{port}#{path}"
      @timeout = timeout
      @socket = TCPSocket.new("127.0.0.1", port)
      @socket = tls_connect(@socket, tls) if tls
      @driver = WebSocket::Driver.client(self, protocols: protocols)
      @messages = []
      @opened = false
      @closed = nil
      @ended = false
      @error = nil
      @driver.on(:open) { @opened = true }
      @driver.on(:message) { |event| @messages << event.data }
      @driver.on(:close) { |event| @closed = event }
      @driver.on(:error) { |event| @error = event.message }
      @driver.start
    end

    # websocket-driver writes its bytes here.
    def write(data)
      @socket.write(data)
    end

    # Wait for the server's 101 (and its check by the driver); true when open.
    def open?
      pump { @opened || @closed }
      @opened
    end

    # The HTTP status of the server's handshake answer.
    def status
      @driver.status
    end

    # The handshake answer's headers (WebSocket::Driver::Headers).
    def headers
      @driver.headers
    end

    # Send a text message.
    def text(message)
      @driver.text(message)
    end

    # The next message from the server; raises if none comes in time.
    def receive
      pump { !@messages.empty? || @closed }
      raise EOFError, "no message (closed: #{@closed&.code.inspect}, error: #{@error.inspect})" if @messages.empty?

      @messages.shift
    end

    # The next message for which the block is true (others are dropped).
    def receive_until
      loop do
        message = receive
        return message if yield(message)
      end
    end

    # Wait for the server to close: the close event (code, reason), or nil
    # when the TCP connection ended without one.
    def closed
      pump { @closed || @ended }
      @closed
    end

    # Wait for the connection to end (with or without a close frame): true
    # when it did within the timeout.
    def ended?
      pump { @ended }
      @ended
    end

    # Close the TCP connection.
    def close
      @socket.close unless @socket.closed?
    end

    private

    def tls_connect(socket, context)
      ssl = OpenSSL::SSL::SSLSocket.new(socket, context)
      ssl.sync_close = true
      ssl.hostname = "localhost"
      ssl.connect
      ssl
    end

    # Bytes already decrypted wait in a TLS session, unseen by the socket's readiness.
    def wait_for_bytes
      return true if @socket.respond_to?(:pending) && @socket.pending.positive?

      @socket.to_io.wait_readable(@timeout)
    end

    # Feed the driver what arrives until the block is true, the connection
    # ends or +timeout+ passes without a byte.
    def pump
      until yield
        break unless wait_for_bytes

        data = @socket.read_nonblock(65_536, exception: false)
        next if data == :wait_readable || data == :wait_writable

        if data.nil?
          @ended = true
          break
        end

        @driver.parse(data)
      end
    rescue Errno::ECONNRESET, IOError, (defined?(OpenSSL) ? OpenSSL::SSL::SSLError : IOError)
      @ended = true
    end
  end
end
