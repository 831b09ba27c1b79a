# frozen_string_literal: true

require "socket"
require "stringio"
require_relative "parser"
require_relative "chunked"
require_relative "env"
require_relative "head"
require_relative "proxy"
require_relative "handoff"
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
        @ready = Handoff.ready # connections with a complete request, oldest first
        @held = Handoff.held # token => Conn
        @tokens = Handoff.counter
        @requests = Handoff.counter
        # Connections accepted and not yet closed or hijacked, wherever they are: watched, ready,
        # held by a thread or on their way between these (stats and max_connections).
        @open = Handoff.counter
        @queue_hist = Handoff.histogram # arrival to a thread's taking the request
        @duration_hist = Handoff.histogram # that taking to the response handed over
        @lock = Mutex.new # the rare counts and the stop
        @let_go = ConditionVariable.new # the reactor has let go of the listeners (@listeners_let_go)
        @poller = Poller.new
        @next_deadline = nil # the earliest deadline of a watched connection, or later (Reactor)
        @stopping = @draining = @closed = @reactor_done = @listeners_let_go = false
        @abandoned = @shed = 0
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
          conn = @held.get(continue_token) or return nil
          admit(conn)
          @requests.incrementAndGet
          return [continue_token, env_for(conn)]
        end
        deadline = idle_ms && (now + (idle_ms / 1000.0))
        loop do
          conn = @ready.take(deadline)
          return conn if conn.nil? || conn == :timeout

          if conn.queued && abandoned?(conn)
            @lock.synchronize { @abandoned += 1 }
            close_conn(conn)
          elsif shed?(conn)
            @queue_hist.observe(now - conn.arrival)
            @lock.synchronize { @shed += 1 }
            send_error(conn, 503, "retry-after: 1\r\n")
          else
            admit(conn)
            token = @tokens.incrementAndGet
            @requests.incrementAndGet
            @held.put(token, conn)
            return [token, env_for(conn)]
          end
        end
      end

      # Drop the connection of +token+ (a no-op for a stale token).
      def abort(token)
        if (conn = @held.take(token))
          timing_done(conn)
          close_conn(conn)
        end
        nil
      end

      # rack.hijack: the engine lets go of the connection. -> [its socket, the bytes already
      # read past the request]
      def hijack(token)
        conn = @held.take(token) or raise ClientGone, "the connection is no longer held by this request"
        timing_done(conn)
        @open.decrementAndGet
        [conn.io, conn.buf.dup]
      end

      # A plain-text error, then close.
      def error_response(token, status)
        conn = @held.take(token) or return
        timing_done(conn)
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

      # Stop accepting; pool threads get nil once the ready requests are taken. Returns once the
      # reactor has let go of the listeners (at most LET_GO_WAIT seconds): the server closes them
      # next, and java.nio closes a listener's socket at once only if no selector holds it then.
      def stop(_timeout = nil)
        @stopping = true
        close_ready
        wake
        await_listeners_let_go
        nil
      end

      def stopping? = @stopping

      def stats
        { requests: @requests.get, abandoned: @abandoned, shed: @shed, queue_time_seconds: @queue_hist.to_h,
          request_duration_seconds: @duration_hist.to_h,
          connections: @open.get, event_backend: @poller.name, max_connections: @cfg[:max_connections],
          ready: health_ready? }
      end

      def backlog = @ready.size

      # [requests waiting for a thread, the longest wait among them in ms] (no board here).
      def queue_look
        oldest = @ready.arrivals.min
        [@ready.size, oldest ? ((now - oldest) * 1000).to_i : 0]
      end

      # How long no thread has been waiting for work (0 while one is): the pool's growth signal.
      def saturated_ms
        since = @ready.saturated_since
        @ready.waiting.zero? && since ? ((now - since) * 1000).to_i : 0
      end

      # Whether complete requests wait for a thread while none waits: the pool's on-demand growth.
      def starved?
        @ready.waiting.zero? && !@ready.empty?
      end

      def close
        return if @closed

        stop
        @closed = true
        @reactor&.join(5)
        @health_thread&.join(1)
        (@ready.drain + @held.conns).each { |c| close_conn(c) }
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
        @held.get(token) or raise ClientGone, "the connection is no longer held by this request"
      end

      def await_listeners_let_go
        return if @reactor.nil? || Thread.current == @reactor

        deadline = now + LET_GO_WAIT
        @lock.synchronize do
          until @listeners_let_go || (left = deadline - now) <= 0
            @let_go.wait(@lock, left)
          end
        end
      end

      def listeners_let_go!
        @lock.synchronize do
          @listeners_let_go = true
          @let_go.broadcast
        end
      end

      # Pool threads get nil from #next_request once the engine stopped and its reactor is done
      # (after the requests it made ready): whichever of the two comes second closes the list.
      def close_ready
        @lock.synchronize do
          next if @ready_closed || !(@stopping && @reactor_done)

          @ready_closed = true
          @ready.close
        end
      end

      # A request its client gave up on while it waited for a thread (+conn.queued+: one taken at
      # once is not looked at, which spares a syscall per request): the client closed its sending side, and
      # the request has no body and nothing after it. Not run, as in Puma (its closed_socket?
      # check). Never on a connection that has pipelined: a client that pipelines and then
      # half-closes still gets every answer.
      def abandoned?(conn)
        return false if conn.pipelined || !conn.buf.empty? || conn.head.chunked || conn.head.content_length.to_i.positive?

        conn.io.recv_nonblock(1, Socket::MSG_PEEK, exception: false) == ""
      rescue SystemCallError, IOError
        true
      end

      # A thread takes +conn+'s request: its wait since it arrived (the engine's read of its first
      # bytes) goes into the queue-time histogram, and its duration starts.
      def admit(conn)
        t = now
        @queue_hist.observe(conn.arrival ? t - conn.arrival : 0.0)
        conn.taken = t
      end

      # The response is handed over (about to be written), or the request dropped or hijacked.
      def timing_done(conn)
        return unless conn.taken

        @duration_hist.observe(now - conn.taken)
        conn.taken = nil
      end

      # queue_timeout: a request complete longer ago than this is answered 503 instead of run.
      def shed?(conn)
        limit = @cfg[:queue_timeout]
        limit && conn.arrival && now - conn.arrival > limit
      end

      # After a response: a token when another complete request is buffered, else the
      # connection goes back to the reactor (or is closed).
      def finish(token, conn)
        @held.take(token)
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
          return @ready.push_behind(conn) ? nil : continue_token(conn)
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
        data = conn.io.read_nonblock(READ_SIZE, read_buffer, exception: false)
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
        token = @tokens.incrementAndGet
        @held.put(token, conn)
        token
      end

      def close_conn(conn)
        return if conn.io.closed?

        @open.decrementAndGet
        conn.io.close
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
          break if n == bytes.bytesize

          bytes = bytes.byteslice(n..)
        end
      rescue SystemCallError, IOError => e
        conn.close = true
        raise ClientGone, e.message
      end
    end
  end
end
