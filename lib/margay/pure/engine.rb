# frozen_string_literal: true

require "socket"
require "stringio"
require_relative "parser"
require_relative "chunked"
require_relative "env"
require_relative "head"
require_relative "proxy"
require_relative "health"
require_relative "reactor"
require_relative "respond"

module Margay
  module Pure
    # The pure-Ruby engine: Native::Engine's contract (lib/margay/server.rb,
    # server/request_handler.rb) on Ruby sockets. One reactor thread
    # (IO.select) accepts, reads heads and whole bodies (a slow client holds no
    # pool thread while it sends) and enforces the header, body and keep-alive
    # timeouts; a pool thread takes a complete request with #next_request and
    # writes its response itself (blocking writes bounded by write_timeout),
    # then continues with a pipelined request or gives the connection back.
    class Engine
      include Head
      include Env
      include Health
      include Reactor
      include Respond
      SETTINGS = %i[max_request_target max_header_size max_headers max_body_size max_chunk_extensions
                    header_timeout body_timeout keepalive_timeout write_timeout max_keepalive_requests
                    max_connections supported_http_methods remote_address remote_address_header
                    proxy_protocol health_check_path max_threads queue_timeout queue_time_header].freeze

      # Engine.listener_io? tells Server to hand #add_listener the listener's IO, not its fd.
      def self.listener_io? = true

      # @param values [Array] one value per name of SETTINGS, in that order
      # @param env_template [Hash] the entries every request's env starts from
      def initialize(values, env_template)
        @cfg = SETTINGS.zip(values).to_h
        methods = @cfg[:supported_http_methods]
        @methods = methods.is_a?(Array) ? methods.map(&:to_s) : nil
        @env_template = env_template.dup.freeze
        remote = @cfg[:remote_address]
        @remote_value = remote == :localhost ? "127.0.0.1" : (remote.is_a?(String) ? remote.dup.freeze : nil)
        @remote_header = @cfg[:remote_address_header]&.downcase&.tr("_", "-")
        @listeners = []
        @conns = {} # io => Conn, the connections the reactor watches
        @returned = Queue.new # connections pool threads give back
        @ready = [] # connections with a complete request, oldest first
        @held = {} # token => Conn
        @token = 0
        @lock = Mutex.new
        @work = ConditionVariable.new
        @poller = Poller.new
        @next_deadline = nil # the earliest deadline of a watched connection, or later (Reactor)
        @stopping = @draining = @closed = false
        @requests = @abandoned = @shed = @waiting = 0
        @saturated_since = now # no thread waits for work yet
        @busy = 0
      end

      # +io+: the listening socket (or its fd under MRI); +unix+, +name+, +port+: its env values;
      # +tls+: an ssl:// bind's context, +http2+: the bind's http2=true (neither here: refused).
      def add_listener(io, unix, name, port, tls = nil, http2 = false, _extended_connect = false)
        raise NotImplementedError, "ssl:// binds: not served by the pure-Ruby engine yet" if tls
        raise NotImplementedError, "http2=true: not served by the pure-Ruby engine" if http2

        io = Socket.for_fd(io).tap { |s| s.autoclose = false } if io.is_a?(Integer)
        @listeners << [io, unix, name.to_s.dup.freeze, port.to_s.dup.freeze]
        @listeners.size - 1
      end

      def start
        @reactor = Thread.new { reactor }
        @reactor.name = "margay-reactor" if @reactor.respond_to?(:name=)
        @started = true
        start_health
        self
      end

      # -> [token, env], :timeout (idle_ms passed without work), or nil (stopped)
      def next_request(continue_token = nil, idle_ms = nil)
        if continue_token
          conn = @lock.synchronize { @held.delete(continue_token) }
          return conn && hand_out(conn)
        end
        deadline = idle_ms && (now + (idle_ms / 1000.0))
        loop do
          conn = @lock.synchronize do
            @waiting += 1
            @saturated_since = nil
            begin
              while @ready.empty?
                return nil if @stopping && @reactor_done
                return :timeout if deadline && now >= deadline

                @work.wait(@lock, deadline ? [deadline - now, 0.001].max : nil)
              end
              @ready.shift
            ensure
              @saturated_since = now if (@waiting -= 1).zero?
            end
          end
          if abandoned?(conn)
            @abandoned += 1
            close_conn(conn)
          elsif shed?(conn)
            @shed += 1
            send_error(conn, 503, "retry-after: 1\r\n")
          else
            return hand_out(conn)
          end
        end
      end

      # Drop the connection of +token+ (a no-op for a stale token).
      def abort(token)
        conn = @lock.synchronize { @held.delete(token) }
        close_conn(conn) if conn
        nil
      end

      # rack.hijack: the engine lets go of the connection. -> [its socket, the bytes already
      # read past the request]
      def hijack(token)
        conn = @lock.synchronize { @held.delete(token) } or raise IOError, "stale request token"
        [conn.io, conn.buf.dup]
      end

      # A plain-text error, then close.
      def error_response(token, status)
        conn = @lock.synchronize { @held.delete(token) } or return
        send_error(conn, status)
      end

      def busy_threads=(count)
        @busy = count
      end

      def drain
        @draining = true
        nil
      end

      def draining? = @draining

      # Stop accepting; pool threads get nil once the ready requests are taken.
      def stop(_timeout = nil)
        @lock.synchronize do
          @stopping = true
          @work.broadcast
        end
        wake
        nil
      end

      def stopping? = @stopping

      def stats
        { requests: @requests, abandoned: @abandoned, shed: @shed, queue_time_seconds: nil, request_duration_seconds: nil,
          connections: @conns.size + @held.size + @returned.size, event_backend: @poller.name, max_connections: @cfg[:max_connections],
          ready: health_ready? }
      end

      def backlog = @lock.synchronize { @ready.size }

      # [requests waiting for a thread, the longest wait among them in ms] (no board here).
      def queue_look
        @lock.synchronize do
          oldest = @ready.filter_map(&:arrival).min
          [@ready.size, oldest ? ((now - oldest) * 1000).to_i : 0]
        end
      end

      # How long no thread has been waiting for work (0 while one is): the pool's growth signal.
      def saturated_ms
        since = @saturated_since
        @waiting.zero? && since ? ((now - since) * 1000).to_i : 0
      end

      # Whether complete requests wait for a thread while none waits: the pool's on-demand growth.
      def starved?
        @waiting.zero? && !@ready.empty?
      end

      def close
        return if @closed

        stop
        @closed = true
        @reactor&.join(5)
        @health_thread&.join(1)
        @lock.synchronize { (@ready + @held.values).each { |c| close_conn(c) } }
        @conns.each_value { |c| close_conn(c) }
        @poller.close
      end

      # The cluster API: no cluster on the pure-Ruby engine.
      def publish_idle(*) = nil

      def others_waiting = 0

      def handoff_quota = 0

      private

      def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

      def held(token)
        @lock.synchronize { @held[token] } or raise IOError, "stale request token"
      end

      # A request its client gave up on while it waited: the client closed its sending side, and
      # the request has no body and nothing after it. Not run, as in Puma (its closed_socket?
      # check). Never on a connection that has pipelined: a client that pipelines and then
      # half-closes still gets every answer.
      def abandoned?(conn)
        return false if conn.pipelined || !conn.buf.empty? || conn.head.chunked || conn.head.content_length.to_i.positive?

        conn.io.recv_nonblock(1, Socket::MSG_PEEK, exception: false) == ""
      rescue SystemCallError, IOError
        true
      end

      # queue_timeout: a request complete longer ago than this is answered 503 instead of run.
      def shed?(conn)
        limit = @cfg[:queue_timeout]
        limit && conn.arrival && now - conn.arrival > limit
      end

      def hand_out(conn)
        env = env_for(conn) # outside the lock: the other threads and the reactor go on meanwhile
        @lock.synchronize do
          token = (@token += 1)
          @held[token] = conn
          @requests += 1
          [token, env]
        end
      end

      # After a response: a token when another complete request is buffered, else the
      # connection goes back to the reactor (or is closed).
      def finish(token, conn)
        @lock.synchronize { @held.delete(token) }
        conn.requests += 1
        if conn.close || !conn.head.keep_alive || @draining || @stopping ||
           conn.requests >= @cfg[:max_keepalive_requests]
          close_conn(conn)
          return nil
        end
        reset(conn)
        pipelined = !conn.buf.empty?
        state = advance(conn)
        state = read_next(conn) if state == :more && conn.buf.empty?
        case (state = answer_probes(conn, state))
        when :complete
          conn.pipelined ||= pipelined || !conn.buf.empty?
          return nil if conn.io.closed?

          # a pipelined request goes behind the requests already waiting (no hogging the thread)
          queued = @lock.synchronize do
            next false if @ready.empty?

            @ready << conn
            @work.signal
            true
          end
          return queued ? nil : continue_token(conn)
        when :drop then return close_conn(conn)
        when Integer then return send_error(conn, state)
        end

        @returned << conn
        wake
        nil
      end

      # The next request may have arrived while this one was answered: one non-blocking read
      # spares the trip through the reactor when it has. -> advance's answer, :drop at EOF.
      def read_next(conn)
        data = conn.io.read_nonblock(READ_SIZE, exception: false)
        return :more if data == :wait_readable
        return :drop if data.nil?

        conn.arrival = now
        conn.deadline = now + @cfg[:header_timeout]
        conn.buf << data
        advance(conn)
      rescue SystemCallError, IOError
        :drop
      end

      def continue_token(conn)
        @lock.synchronize { (@token += 1).tap { |t| @held[t] = conn } }
      end

      def close_conn(conn)
        conn.io.close unless conn.io.closed?
      rescue IOError, SystemCallError
        nil
      end

      def send_error(conn, status, fields = "")
        write(conn, error_page(status, fields))
      rescue ClientGone
        nil
      ensure
        close_conn(conn)
      end

      def write(conn, bytes)
        conn.started = true
        until bytes.empty?
          n = conn.io.write_nonblock(bytes, exception: false)
          if n == :wait_writable
            raise ClientGone, "write_timeout" unless IO.select(nil, [conn.io], nil, @cfg[:write_timeout])

            next
          end
          bytes = bytes.byteslice(n..)
        end
      rescue SystemCallError, IOError => e
        conn.close = true
        raise ClientGone, e.message
      end
    end
  end
end
