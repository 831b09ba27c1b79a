# frozen_string_literal: true

require "socket"
require_relative "systemd"

module Margay
  # Internal: opens the listening sockets named by the bind URLs, or takes them
  # over from a previous master (hot restart). Listeners live in Ruby, so a
  # master can hand them to workers or to a re-executed binary; the native
  # engine only receives their descriptors.
  class Binder
    # "bind-url=fd,bind-url=fd": listeners a re-executed master inherits.
    INHERIT_ENV = "MARGAY_INHERIT_FDS"
    # "fd:k,fd:n": client connections a re-executed cluster master inherits
    # (held for its workers during the hot restart; Cluster::Balancer::Forwarder).
    INHERIT_CONNECTIONS_ENV = "MARGAY_INHERIT_CONNECTIONS"

    # bind: the URL as configured; url: as bound (port 0 resolved).
    # activated: handed over by systemd (never unlinked or re-bound by us).
    Listener = Struct.new(:io, :bind, :url, :unix, :server_name, :server_port, :activated, keyword_init: true)

    # @param binds [Array<String>] tcp://HOST:PORT or unix://PATH
    # @param backlog [Integer] listen(2) backlog
    # @param inherited [String, nil] the INHERIT_ENV value, if any
    def initialize(binds, backlog:, inherited: nil)
      @binds = binds
      @backlog = backlog
      @inherited = parse_inherited(inherited)
    end

    # Set across a hot restart when the listeners came from socket activation.
    ACTIVATED_ENV = "MARGAY_SOCKET_ACTIVATED"

    # The listeners for this process: systemd's (socket activation), or those
    # a hot restart handed over, or newly bound ones for +binds+.
    def self.open(binds, backlog:, env: ENV)
      sockets = Systemd.activated_sockets(env: env)
      inherited = env.delete(INHERIT_ENV)
      if !sockets.empty? || env.delete(ACTIVATED_ENV)
        sockets = parse_inherited(inherited).values.map { |fd| Socket.for_fd(fd).tap { |io| io.close_on_exec = true } } if sockets.empty?
        return activated(sockets)
      end
      new(binds, backlog: backlog, inherited: inherited).bind
    end

    # {bind-url => fd} from an INHERIT_ENV value ({} for nil or "").
    def self.parse_inherited(value)
      return {} if value.nil? || value.empty?

      value.split(",").to_h do |pair|
        url, fd = pair.split(/=(?=\d+\z)/)
        [url, Integer(fd, 10)]
      end
    end

    # Listeners for sockets handed over by systemd socket activation: one per
    # socket, whatever the configured binds say (systemd owns the addresses).
    def self.activated(sockets)
      sockets.map do |io|
        addr = io.local_address
        if addr.unix?
          Listener.new(io: io, bind: "unix://#{addr.unix_path}", url: "unix://#{addr.unix_path}", unix: true,
                       server_name: "localhost", server_port: "0", activated: true)
        else
          host = addr.ip_address
          shown = addr.ipv6? ? "[#{host}]" : host
          url = "tcp://#{shown}:#{addr.ip_port}"
          name = %w[0.0.0.0 ::].include?(host) ? "localhost" : host
          Listener.new(io: io, bind: url, url: url, unix: false, server_name: name, server_port: addr.ip_port.to_s,
                       activated: true)
        end
      end
    end

    # @return [Array<Listener>] one per bind, ports resolved
    # Inherited sockets (a hot restart) are taken over again, close-on-exec like
    # new ones, so a program the app runs does not keep the port open; those
    # whose bind is gone from the configuration are closed.
    def bind
      listeners = @binds.map do |url|
        fd = @inherited[url]
        io = if fd
               (url.start_with?("unix://") ? UNIXServer.for_fd(fd) : TCPServer.for_fd(fd)).tap { |s| s.close_on_exec = true }
             end
        url.start_with?("unix://") ? bind_unix(url, io) : bind_tcp(url, io)
      end
      (@inherited.keys - @binds).each { |url| close_fd(@inherited[url]) }
      listeners
    rescue SystemCallError, SocketError => e
      raise ConfigError, "cannot bind: #{e.message}"
    end

    private

    def parse_inherited(value)
      self.class.parse_inherited(value)
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

    def close_fd(fd)
      IO.for_fd(fd).close
    rescue SystemCallError, ArgumentError
      nil
    end

    def socket_in_use?(path)
      UNIXSocket.new(path).close
      true
    rescue SystemCallError
      false
    end
  end
end
