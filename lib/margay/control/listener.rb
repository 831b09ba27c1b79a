# frozen_string_literal: true

require "socket"
require_relative "../errors"

module Margay
  module Control
    # The control app's own listener: one Ruby thread, one connection at a
    # time, HTTP/1.0 and 1.1 GET requests only (no keep-alive), the answer then close (what
    # pumactl and the metrics exporters send). The control plane is not the
    # hot path: a second engine would cost a thread pool and an event loop
    # for a few requests a minute, and keeping it apart means an app that
    # saturates every thread of the server still answers /stats.
    #
    # Strict and bounded: the request head must arrive within READ_TIMEOUT
    # and fit in MAX_HEAD bytes; anything else gets a 400 and the close.
    # Forked children (cluster workers, a plugin's process) close their copy
    # of the listening socket at once (Process._fork).
    class Listener
      READ_TIMEOUT = 5
      MAX_HEAD = 8192
      REQUEST_LINE = %r{\A(?<method>[A-Z]+) (?<target>/\S*) HTTP/1\.[01]\r?\n}
      REASONS = { 200 => "OK", 400 => "Bad Request", 403 => "Forbidden", 404 => "Not Found",
                  405 => "Method Not Allowed", 500 => "Internal Server Error" }.freeze

      @listeners = []
      class << self
        # Listeners open in this process (closed in a forked child).
        attr_reader :listeners
      end

      # Close every listener's socket in a forked child (its thread is gone).
      def self.after_fork_child
        @listeners.each(&:close_in_child)
        @listeners.clear
      end

      # Kernel#fork and friends call Process._fork (Ruby 3.1+).
      module ForkHook
        def _fork
          pid = super
          Listener.after_fork_child if pid.zero?
          pid
        end
      end
      Process.singleton_class.prepend(ForkHook)

      # The URL it listens on, with a port 0 resolved ("tcp://127.0.0.1:43121").
      attr_reader :url

      # Bind +url+ ("tcp://HOST:PORT" or "unix://PATH").
      # @raise [ConfigError] an unknown scheme, or the address cannot be bound
      def initialize(url, log:)
        @app = nil
        @log = log
        @thread = nil
        @unix_path = nil
        @client = nil
        @accept_failed = false
        @server = open_socket(url)
        self.class.listeners << self
      end

      # Serve +app+ (a Control::App) in a background thread. Returns self.
      def start(app)
        @app = app
        @thread = Thread.new { serve }
        @thread.name = "margay control"
        @thread.report_on_exception = false
        self
      end

      # Close the socket (and remove a unix socket's file), end the thread.
      def stop
        self.class.listeners.delete(self)
        @server.close unless @server.closed?
        @thread&.join(READ_TIMEOUT + 1)
        File.unlink(@unix_path) if @unix_path && File.socket?(@unix_path)
      rescue SystemCallError
        nil
      end

      # In a forked child: the copies of the socket and of a connection
      # being answered go (a copy would keep pumactl waiting for the close
      # after the parent closed it); the socket's file stays.
      def close_in_child
        [@server, @client].each { |io| io.close unless io.nil? || io.closed? }
      rescue IOError
        nil
      end

      private

      def open_socket(url)
        case url
        when %r{\Atcp://(?:\[(?<host>[0-9a-fA-F:.]+)\]|(?<host>[^\s/:\[\]]+)):(?<port>\d{1,5})\z}
          host = Regexp.last_match(:host)
          server = TCPServer.new(host, Integer(Regexp.last_match(:port), 10))
          port = server.local_address.ip_port
          @url = "tcp://#{host.include?(':') ? "[#{host}]" : host}:#{port}"
          server
        when %r{\Aunix://(?<path>\S+)\z}
          @unix_path = File.expand_path(Regexp.last_match(:path))
          remove_stale_socket(@unix_path)
          @url = url
          UNIXServer.new(@unix_path)
        else
          raise ConfigError, "invalid control_url #{url.inspect}: expected tcp://HOST:PORT or unix://PATH"
        end
      rescue SystemCallError, SocketError => e
        raise ConfigError, "cannot open the control app on #{url}: #{e.message.sub(/ @ \w+/, '')}"
      end

      # A socket file nobody answers on is a leftover of a process that died: remove it.
      def remove_stale_socket(path)
        return unless File.socket?(path)

        UNIXSocket.new(path).close
        raise ConfigError, "control_url unix://#{path} is in use by another process"
      rescue Errno::ECONNREFUSED, Errno::ENOENT, IOError # JRuby refuses with an IOError
        File.unlink(path) if File.socket?(path)
      end

      # The accept errors that pass: no descriptor or memory for the
      # connection (a flood, the app holding them). The listener stays.
      ACCEPT_AGAIN = [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM, Errno::ECONNABORTED,
                      Errno::EPROTO].freeze

      # One connection at a time; an action runs once its connection is
      # closed (pumactl reads until the close).
      def serve
        loop do
          @client = accept
          next unless @client

          action = begin
            handle(@client)
          rescue StandardError => e
            @log.warn("control app: #{e.class}: #{e.message}")
            nil
          ensure
            @client.close unless @client.closed?
          end
          run(action) if action
        end
      rescue IOError, SystemCallError
        nil # the listener was closed: stop
      end

      # The next connection, or nil after an error that passes (said once
      # until a connection is accepted again, then a short pause).
      def accept
        client = @server.accept
        @accept_failed = false
        client
      rescue *ACCEPT_AGAIN => e
        raise if @server.closed?

        @log.warn("control app: accept failed (#{e.message}): trying again") unless @accept_failed
        @accept_failed = true
        sleep 0.1
        nil
      end

      def run(action)
        action.call
      rescue StandardError => e
        @log.warn("control app: the action failed: #{e.class}: #{e.message}")
      end

      # Answer one request; returns the action to run after the close, if any.
      def handle(client)
        head = read_head(client)
        match = head && REQUEST_LINE.match(head)
        return write(client, 400, "text/plain", "Bad Request") unless match
        return write(client, 405, "text/plain", "Method Not Allowed") unless match[:method] == "GET"

        path, query = match[:target].split("?", 2)
        env = { "REQUEST_METHOD" => match[:method], "PATH_INFO" => path, "QUERY_STRING" => query.to_s }
        status, headers, body = @app.call(env)
        write(client, status, headers["content-type"], body.join)
        env[App::AFTER_RESPONSE]
      end

      # The request head up to its blank line, or nil when it does not come
      # whole within READ_TIMEOUT and MAX_HEAD bytes.
      def read_head(client)
        head = +""
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + READ_TIMEOUT
        until head.include?("\r\n\r\n") || head.include?("\n\n")
          left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          return nil if left <= 0 || head.bytesize > MAX_HEAD || !client.wait_readable(left)

          chunk = client.read_nonblock(MAX_HEAD, exception: false)
          return nil if chunk.nil?

          head << chunk if chunk.is_a?(String)
        end
        head
      end

      # The answer, within READ_TIMEOUT: a client that stops reading gives up
      # its answer instead of holding the only control thread.
      def write(client, status, type, body)
        data = "HTTP/1.0 #{status} #{REASONS.fetch(status, 'Unknown')}\r\ncontent-type: #{type}\r\n" \
               "content-length: #{body.bytesize}\r\nconnection: close\r\n\r\n#{body}".b
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + READ_TIMEOUT
        until data.empty?
          written = client.write_nonblock(data, exception: false)
          if written == :wait_writable
            left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
            return nil if left <= 0 || !client.wait_writable(left)
          else
            data = data.byteslice(written..)
          end
        end
        nil
      rescue SystemCallError, IOError
        nil # the client went away
      end
    end
  end
end
