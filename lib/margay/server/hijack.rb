# frozen_string_literal: true

require "socket"
require_relative "../constants"
require_relative "tls_socket"

module Margay
  class Server
    # Internal: rack.hijack. The engine lets go of the connection and hands
    # over the bytes it had already read past the request (a client that
    # speaks right after an Upgrade, in the same packet); they are pushed back
    # into the socket's Ruby read buffer, so read, readpartial, read_nonblock,
    # gets, wait_readable and IO.select see them before anything newer.
    # (recv and sysread, which bypass that buffer, raise IOError while it
    # holds bytes rather than skip them. A poller that watches the descriptor
    # itself, nio4r say, is not told about them: it learns of them with the
    # client's next bytes. WebSocket clients wait for the 101 before they
    # speak, so this matters only to protocols that do not.) A TLS connection is handed over
    # as a TLSSocket: its session goes with the socket, and the app reads and writes plain text.
    class Hijack
      # The connection of +token+, taken from +engine+, as a Socket (a TLSSocket on a TLS
      # connection) the caller owns.
      def self.take(engine, token)
        fd, buffered = engine.hijack(token)
        io = case fd
             when Integer then Socket.for_fd(fd)
             when IO then fd # the pure-Ruby engine hands over its socket itself
             else return TLSSocket.new(fd, fd.fileno, buffered) # a Native::TLSSession
             end
        io.autoclose = true
        io.ungetbyte(buffered) unless buffered.empty?
        io
      end

      # The socket once #call took it, else nil.
      attr_reader :io

      # +env+ gets rack.hijack_io once the app takes the socket. (Three instance
      # variables: Ruby keeps them in the object, no table beside it; @io is set
      # once the socket is taken. The native engine makes a plain request's
      # Hijack itself, with the same three: Native::Engine#request_objects.)
      def initialize(engine, token, env)
        @engine = engine
        @token = token
        @env = env
      end

      # env["rack.hijack"] (full hijack): the app takes the socket and answers
      # by itself. Returns the socket (the same one on every call).
      def call
        @io ||= Hijack.take(@engine, @token).tap { |io| @env[RACK_HIJACK_IO] = io }
      end
    end
  end
end
