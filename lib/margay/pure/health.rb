# frozen_string_literal: true

require "socket"
require_relative "parser"

module Margay
  module Pure
    # Health as core/health.c answers it, never on an app thread: health_check_path on the main
    # listeners (answered by the reactor before the app), and the health listeners (health_bind:
    # /livez, /readyz, /metrics; agent_bind: HAProxy's agent line) served by a thread of their own,
    # each client on a short-lived thread bounded in number and time. Mixed into Engine.
    module Health
      MAX_CLIENTS = 64   # served at once; a new one closes the oldest
      HEAD_MAX = 8192    # a longer request head: 431
      TIMEOUT = 5        # seconds for a whole exchange
      LINGER = 1         # seconds after the answer to read what the client still sends
      AGENT_MIN_WEIGHT = 10
      METRICS_MAX = 4 * 1024 * 1024
      PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"

      # +fd+: a health listener (an IO, or its fd under MRI); +agent+: it answers the agent line.
      def add_health_listener(fd, agent = false)
        io = fd.is_a?(Integer) ? Socket.for_fd(fd).tap { |s| s.autoclose = false } : fd
        (@health_listeners ||= []) << [io, agent]
        nil
      end

      def metrics_text=(text)
        raise ArgumentError, "metrics text over #{METRICS_MAX} bytes" if text && text.bytesize > METRICS_MAX

        @metrics_text = text&.b&.freeze
      end

      private

      def health_ready? = @started && !@draining && !@stopping

      def health_closing? = @draining || @stopping

      def start_health
        return unless @health_listeners

        @health_clients = []
        @health_lock = Mutex.new
        @health_thread = Thread.new { health_loop }
        @health_thread.name = "margay-health" if @health_thread.respond_to?(:name=)
      end

      def health_loop
        ios = @health_listeners.map(&:first)
        until @closed
          ready, = IO.select(ios, nil, nil, 0.2)
          ready&.each { |io| health_accept(io) }
        end
      rescue IOError, SystemCallError
        nil # a listener closed: the server is stopping
      end

      def health_accept(io)
        client = io.accept_nonblock(exception: false)
        return if client == :wait_readable

        client = client.first if client.is_a?(Array) # Socket#accept_nonblock: [socket, address]
        agent = @health_listeners.find { |l| l.first == io }[1]
        agent ? health_agent(client) : health_client(client)
      rescue Errno::ECONNABORTED, Errno::EMFILE, Errno::ENFILE
        nil
      end

      # The agent line at once, then close (what the agent sent is read away: a FIN, not a reset).
      def health_agent(client)
        client.write(agent_line)
        client.read_nonblock(4096, exception: false)
      rescue IOError, SystemCallError
        nil
      ensure
        client.close
      end

      def agent_line
        return health_closing? ? "drain\n" : "down\n" unless health_ready?

        capacity = @cfg[:max_threads].to_i
        weight = capacity.positive? ? (capacity - @busy) * 100 / capacity : 100
        "up ready #{weight.clamp(AGENT_MIN_WEIGHT, 100)}% maxconn:#{capacity}\n"
      end

      # Each client on a thread of its own; past MAX_CLIENTS the oldest gives way (clients that
      # connect and say nothing cannot keep a probe out).
      def health_client(client)
        oldest = @health_lock.synchronize do
          @health_clients << client
          @health_clients.shift if @health_clients.size > MAX_CLIENTS
        end
        begin
          oldest&.close
        rescue IOError
          nil
        end
        Thread.new do
          health_exchange(client)
        ensure
          @health_lock.synchronize { @health_clients.delete(client) }
          client.close unless client.closed?
        end
      end

      def health_exchange(client)
        deadline = now + TIMEOUT
        buf = +"".b
        loop do
          return unless client.wait_readable([deadline - now, 0].max)

          data = client.read_nonblock(HEAD_MAX - buf.bytesize, exception: false)
          return if data.nil? # EOF: a half-sent request is not answered
          next if data == :wait_readable

          buf << data
          head = Parser.parse(buf, max_head: HEAD_MAX, max_target: 2048, max_headers: 64)
          head = 431 if head.nil? && buf.bytesize >= HEAD_MAX
          next if head.nil?

          client.write(health_answer(head))
          client.close_write
          linger(client)
          return
        end
      rescue IOError, SystemCallError
        nil
      end

      def linger(client)
        deadline = now + LINGER
        while client.wait_readable([deadline - now, 0].max)
          break if client.read_nonblock(4096, exception: false).nil?
        end
      end

      def health_answer(head)
        return error_page(head) if head.is_a?(Integer)

        bodyless = head.method == "HEAD"
        unless bodyless || head.method == "GET"
          return small_answer(405, "Method Not Allowed\n", extra: "allow: GET, HEAD\r\n")
        end

        case head.path
        when "/livez" then small_answer(200, "ok\n", head: bodyless)
        when "/readyz" then probe_answer(bodyless, false, 1)
        when "/metrics"
          text = @metrics_text
          return small_answer(404, "no metrics yet\n", head: bodyless) unless text

          answer_head(200, PROMETHEUS_TEXT, "", text.bytesize, false, 1) + (bodyless ? "" : text)
        else small_answer(404, "Not Found\n", head: bodyless)
        end
      end

      # health_check_path's answer (and /readyz's): 200 ready, 503 otherwise.
      def probe_answer(head, keep_alive, minor)
        ready = health_ready?
        small_answer(ready ? 200 : 503, ready ? "ready\n" : "not ready\n", head: head, keep_alive: keep_alive,
                                                                           minor: minor)
      end

      def small_answer(status, body, head: false, extra: "", keep_alive: false, minor: 1)
        answer_head(status, "text/plain", extra, body.bytesize, keep_alive, minor) + (head ? "" : body)
      end

      def answer_head(status, type, extra, length, keep_alive, minor)
        connection = !keep_alive ? "connection: close\r\n" : (minor.zero? ? "connection: keep-alive\r\n" : "")
        "HTTP/1.1 #{status} #{Head::REASONS.fetch(status, "")}\r\ncontent-type: #{type}\r\ncontent-length: #{length}\r\n" \
          "cache-control: no-store\r\n#{extra}#{connection}#{date_field}\r\n".b
      end

      # The engine's own plain-text answer, then close (http/status.c's page); +fields+: more lines.
      def error_page(status, fields = "")
        reason = Head::REASONS.fetch(status, "")
        "HTTP/1.1 #{status} #{reason}\r\ncontent-type: text/plain\r\ncontent-length: #{reason.bytesize + 1}\r\n" \
          "connection: close\r\n#{fields}#{date_field}\r\n#{reason}\n".b
      end

      # A complete request on a main listener that is a health_check_path probe (GET or HEAD).
      def probe?(conn)
        path = @cfg[:health_check_path]
        path && conn.head.path == path && %w[GET HEAD].include?(conn.head.method)
      end

      # Answer the probes among the requests framed on +conn+ (+state+: advance's answer), as
      # the loop does before the app: not counted, kept alive as a response would be. -> the
      # state of what follows them.
      def answer_probes(conn, state)
        while state == :complete && probe?(conn)
          keep = conn.head.keep_alive && !health_closing? && conn.requests + 1 < @cfg[:max_keepalive_requests]
          write(conn, probe_answer(conn.head.method == "HEAD", keep, conn.head.minor))
          return :drop unless keep

          conn.requests += 1
          reset(conn)
          state = advance(conn)
        end
        state
      end
    end
  end
end
