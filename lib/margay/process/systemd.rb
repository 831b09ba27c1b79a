# frozen_string_literal: true

require "socket"

module Margay
  # Internal: systemd integration without libsystemd. sd_notify(3) messages
  # over the NOTIFY_SOCKET datagram socket, and the watchdog interval from
  # WATCHDOG_USEC. Every method is a no-op when not run under systemd.
  module Systemd
    module_function

    # Send one notification ("READY=1", "RELOADING=1", "STOPPING=1", "WATCHDOG=1", "STATUS=...").
    def notify(state, env: ENV)
      path = env["NOTIFY_SOCKET"]
      return false if path.nil? || path.empty?

      path = "\0#{path[1..]}" if path.start_with?("@") # abstract namespace
      sock = Socket.new(:UNIX, :DGRAM)
      sock.connect(Socket.pack_sockaddr_un(path))
      sock.write(state)
      true
    rescue SystemCallError
      false
    ensure
      sock&.close
    end

    # Seconds between WATCHDOG=1 pings (half the configured interval), or nil.
    def watchdog_interval(env: ENV)
      usec = env["WATCHDOG_USEC"].to_i
      return nil unless usec.positive?
      return nil if env["WATCHDOG_PID"] && env["WATCHDOG_PID"].to_i != Process.pid

      usec / 2_000_000.0
    end

    # Listening sockets passed by socket activation (LISTEN_FDS), as IOs; empty
    # unless they are meant for this process. Clears the variables so that
    # child processes do not take them again.
    def activated_sockets(env: ENV)
      count = env["LISTEN_FDS"].to_i
      return [] unless count.positive? && env["LISTEN_PID"].to_i == Process.pid

      %w[LISTEN_FDS LISTEN_PID LISTEN_FDNAMES].each { |k| env.delete(k) }
      Array.new(count) do |i|
        io = Socket.for_fd(3 + i)
        io.close_on_exec = true
        io
      end
    end
  end
end
