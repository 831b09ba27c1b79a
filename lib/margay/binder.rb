# frozen_string_literal: true

require "socket"

module Margay
  # Internal: opens the listening sockets named by the bind URLs, or takes them
  # over from a previous master (hot restart). Listeners live in Ruby, so a
  # master can hand them to workers or to a re-executed binary; the native
  # engine only receives their descriptors.
  class Binder
    # "bind-url=fd,bind-url=fd": listeners a re-executed master inherits.
    INHERIT_ENV = "MARGAY_INHERIT_FDS"

    # bind: the URL as configured; url: as bound (port 0 resolved).
    Listener = Struct.new(:io, :bind, :url, :unix, :server_name, :server_port, keyword_init: true)

    # @param binds [Array<String>] tcp://HOST:PORT or unix://PATH
    # @param backlog [Integer] listen(2) backlog
    # @param inherited [String, nil] the INHERIT_ENV value, if any
    def initialize(binds, backlog:, inherited: nil)
      @binds = binds
      @backlog = backlog
      @inherited = parse_inherited(inherited)
    end

    # @return [Array<Listener>] one per bind, ports resolved
    def bind
      @binds.map do |url|
        fd = @inherited[url]
        io = if fd
               url.start_with?("unix://") ? UNIXServer.for_fd(fd) : TCPServer.for_fd(fd)
             end
        url.start_with?("unix://") ? bind_unix(url, io) : bind_tcp(url, io)
      end
    rescue SystemCallError, SocketError => e
      raise ConfigError, "cannot bind: #{e.message}"
    end

    private

    def parse_inherited(value)
      return {} if value.nil? || value.empty?

      value.split(",").to_h do |pair|
        url, fd = pair.split(/=(?=\d+\z)/)
        [url, Integer(fd, 10)]
      end
    end

    def bind_tcp(url, io)
      host, port = url.delete_prefix("tcp://").match(/\A\[?(.*?)\]?:(\d+)\z/).captures
      unless io
        io = TCPServer.new(host, Integer(port, 10))
        io.listen(@backlog)
      end
      actual = io.local_address.ip_port
      shown = host.include?(":") ? "[#{host}]" : host
      name = %w[0.0.0.0 ::].include?(host) ? "localhost" : host
      Listener.new(io: io, bind: url, url: "tcp://#{shown}:#{actual}", unix: false,
                   server_name: name, server_port: actual.to_s)
    end

    def bind_unix(url, io)
      path = url.delete_prefix("unix://")
      unless io
        File.unlink(path) if File.socket?(path) && !socket_in_use?(path)
        io = UNIXServer.new(path)
        io.listen(@backlog)
      end
      Listener.new(io: io, bind: url, url: url, unix: true, server_name: "localhost", server_port: "0")
    end

    def socket_in_use?(path)
      UNIXSocket.new(path).close
      true
    rescue SystemCallError
      false
    end
  end
end
