# frozen_string_literal: true

require "openssl"
require "socket"
require "support/tls_certs"

module Margay
  # A TLS 1.3 client whose ciphertext the test sends itself, so that it decides which records
  # reach the server together and where they are cut: the client's OpenSSL socket runs over a
  # socket pair, a thread copies the server's bytes to it, and what the client writes waits until
  # #deliver. The handshake's first flight (the ClientHello) goes out at once; the client's Finished
  # is held like everything after it (#held), so a test can send requests with it.
  class HeldTLS
    # Connected to 127.0.0.1:+port+, trusting the test CA, offering the ALPN protocols +alpn+
    # (none by default); the Finished is held.
    def initialize(port, alpn: nil)
      @tcp = TCPSocket.new("127.0.0.1", port)
      near, @far = UNIXSocket.pair
      @spoke = false
      @down = Thread.new { copy_down }
      ctx = OpenSSL::SSL::SSLContext.new
      ctx.set_params(ca_file: TLSCerts.path("ca.pem"), verify_mode: OpenSSL::SSL::VERIFY_PEER)
      ctx.max_version = OpenSSL::SSL::TLS1_3_VERSION
      ctx.min_version = OpenSSL::SSL::TLS1_3_VERSION # the client's last flight needs no answer
      ctx.alpn_protocols = alpn if alpn
      @ssl = OpenSSL::SSL::SSLSocket.new(near, ctx)
      @ssl.sync_close = true
      @ssl.hostname = "localhost"
      handshake
    end

    # The client's OpenSSL socket (responses are read from it).
    attr_reader :ssl

    # The ciphertext the client wrote and the server has not been sent yet (taken).
    def held
      data = @held
      @held = +"".b
      data + take_far
    end

    # Encrypts each of +texts+ as a record of its own; returns their ciphertext, not sent.
    def seal(*texts)
      texts.each { |t| @ssl.write(t) }
      held
    end

    # Sends +bytes+ (ciphertext) to the server.
    def deliver(bytes)
      @tcp.write(bytes)
    end

    def close
      @ssl.close
      @tcp.close
      @down.join(5)
    end

    private

    # The server's bytes to the client's socket; the first of them ends the first flight.
    def copy_down
      loop do
        data = @tcp.readpartial(65_536)
        @spoke = true
        @far.write(data)
      end
    rescue IOError, SystemCallError
      @far.close_write unless @far.closed?
    end

    def handshake
      @held = +"".b
      loop do
        state = @ssl.connect_nonblock(exception: false)
        bytes = take_far
        @spoke ? @held << bytes : @tcp.write(bytes)
        break unless %i[wait_readable wait_writable].include?(state)

        @ssl.to_io.wait_readable(5) or raise "no handshake from the server within 5 s"
      end
    end

    def take_far
      data = +"".b
      loop do
        chunk = @far.read_nonblock(65_536, exception: false)
        break unless chunk.is_a?(String)

        data << chunk
      end
      data
    end
  end
end
