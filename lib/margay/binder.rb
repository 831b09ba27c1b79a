# frozen_string_literal: true

require "socket"

module Margay
  # Internal: opens the listening sockets named by the bind URLs. Listeners
  # live in Ruby (so a later master process can hand them to workers or to a
  # re-executed binary); the native engine only receives their descriptors.
  class Binder
    Listener = Struct.new(:io, :url, :unix, :server_name, :server_port, keyword_init: true)

    def initialize(binds, backlog:)
      @binds = binds
      @backlog = backlog
    end

    # @return [Array<Listener>] one per bind, ports resolved
    def bind
      @binds.map { |url| url.start_with?("unix://") ? bind_unix(url) : bind_tcp(url) }
    rescue SystemCallError, SocketError => e
      raise ConfigError, "cannot bind: #{e.message}"
    end

    private

    def bind_tcp(url)
      host, port = url.delete_prefix("tcp://").match(/\A\[?(.*?)\]?:(\d+)\z/).captures
      server = TCPServer.new(host, Integer(port, 10))
      server.listen(@backlog)
      actual = server.local_address.ip_port
      shown = host.include?(":") ? "[#{host}]" : host
      name = %w[0.0.0.0 ::].include?(host) ? "localhost" : host
      Listener.new(io: server, url: "tcp://#{shown}:#{actual}", unix: false,
                   server_name: name, server_port: actual.to_s)
    end

    def bind_unix(url)
      path = url.delete_prefix("unix://")
      File.unlink(path) if File.socket?(path) && !socket_in_use?(path)
      server = UNIXServer.new(path)
      server.listen(@backlog)
      Listener.new(io: server, url: url, unix: true, server_name: "localhost", server_port: "0")
    end

    def socket_in_use?(path)
      UNIXSocket.new(path).close
      true
    rescue SystemCallError
      false
    end
  end
end
