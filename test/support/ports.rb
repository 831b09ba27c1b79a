# frozen_string_literal: true

require "socket"

module Margay
  # Test support (internal): a TCP port for a child that must be told its port in advance.
  module TestPorts
    # A port on 127.0.0.1 that was free a moment ago (bound to port 0, then released): for a
    # child that cannot bind port 0 itself (Puma matches inherited sockets by address,
    # systemd-socket-activate listens for it). Prefer binding port 0 wherever possible.
    def free_port
      server = TCPServer.new("127.0.0.1", 0)
      server.local_address.ip_port
    ensure
      server&.close
    end
  end
end
