# frozen_string_literal: true

require "socket"
require "stringio"
require_relative "parser"
require_relative "chunked"
require_relative "env"
require_relative "head"
require_relative "proxy"
require_relative "health"

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
      SETTINGS = %i[max_request_target max_header_size max_headers max_body_size max_chunk_extensions
                    header_timeout body_timeout keepalive_timeout write_timeout max_keepalive_requests
                    max_connections supported_http_methods remote_address remote_address_header
                    proxy_protocol health_check_path max_threads queue_timeout queue_time_header].freeze

      # A client connection; +head+ and +input+ describe its current request.
      Conn = Struct.new(:io, :buf, :listener, :addr, :head, :chunked, :input, :deadline, :requests, :arrival,
                        :started, :close, :stream, :left, :proxy, :pipelined,
                        :body_from, :body_wait)

      READ_SIZE = 16_384

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
        @wake_r, @wake_w = IO.pipe
        @stopping = @draining = @closed = false
        @requests = @abandoned = @shed = @waiting = 0
        @saturated_since = now # no thread waits for work yet
        @busy = 0
      end

      # +io+: the listening socket (or its fd under MRI); +unix+, +name+, +port+: its env values;
      # +tls+: an ssl:// bind's context, +http2+: the bind's http2=true (neither here: refused).
      def add_listener(io, unix, name, port, tls = nil, http2 = false)
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

      # -> a token to continue with (a pipelined request is buffered), or nil
      def respond(token, status, headers, body)
        conn = held(token)
        status = check_status(status)
        raise InvalidResponse, "body must be an Array" unless body.is_a?(Array)

        length = body.sum do |part|
          raise InvalidResponse, "body parts must be Strings, got #{part.class}" unless part.is_a?(String)

          part.bytesize
        end
        built = head_begin(status, headers)
        send_body = conn.head.method != "HEAD" && !bodyless?(status)
        if built.content_length >= 0 && send_body && !built.has_te && built.content_length != length
          raise InvalidResponse, "content-length #{built.content_length} does not match the body's #{length} bytes"
        end

        out = head_finish(conn, built, status, bodyless?(status) || built.has_te ? -1 : length)
        body.each { |part| out << part.b } if send_body
        write(conn, out)
        finish(token, conn)
      end

      # -> like #respond; false if the file cannot be opened (or its length is not the app's)
      def respond_file(token, status, headers, path)
        file = File.open(path, "rb") rescue (return false) # rubocop:disable Style/RescueModifier
        begin
          return false unless file.stat.file?

          conn = held(token)
          status = check_status(status)
          built = head_begin(status, headers)
          return false if built.has_te || (built.content_length >= 0 && built.content_length != file.size)

          write(conn, head_finish(conn, built, status, bodyless?(status) ? -1 : file.size))
          if conn.head.method != "HEAD" && !bodyless?(status)
            while (chunk = file.read(65_536))
              write(conn, chunk)
            end
          end
          finish(token, conn)
        ensure
          file.close
        end
      end

      # A 103 response before the final one (HTTP/1.1 only): true when sent.
      def early_hints(token, headers)
        conn = held(token)
        return false if conn.head.minor.zero? || conn.started

        write(conn, "HTTP/1.1 103 Early Hints\r\n#{hint_fields(headers)}\r\n".b)
        true
      end

      def response_started?(token) = held(token).started ? true : false

      # The head of a response of unknown length; chunked on HTTP/1.1, close-delimited on 1.0.
      def stream_start(token, status, headers)
        conn = held(token)
        status = check_status(status)
        built = head_begin(status, headers)
        if built.hijack
          conn.close = true    # the app takes the socket after the head ...
          built.has_te = true  # ... and frames its bytes itself: no content-length or chunked
        end
        out = head_finish(conn, built, status, built.hijack || bodyless?(status) ? -1 : built.content_length)
        conn.stream = built.chunked && conn.head.method != "HEAD" ? :chunked : :raw
        conn.left = conn.head.method == "HEAD" || bodyless?(status) ? 0 : built.content_length
        write(conn, out)
        built.hijack
      end

      def stream_write(token, string)
        conn = held(token)
        return if string.empty? || conn.head.method == "HEAD"

        if conn.left >= 0
          if string.bytesize > conn.left
            raise InvalidResponse, "body is longer than its content-length (#{string.bytesize - conn.left} more bytes)"
          end

          conn.left -= string.bytesize
        end
        write(conn, conn.stream == :chunked ? "#{string.bytesize.to_s(16)}\r\n#{string.b}\r\n".b : string.b)
      end

      def stream_finish(token)
        conn = held(token)
        write(conn, "0\r\n\r\n".b) if conn.stream == :chunked
        conn.close = true if conn.left.to_i.positive? # fewer bytes than announced: only closing frames it
        finish(token, conn)
      end

      # Writes are not queued: every write returned once the socket took it.
      def flush(token) = held(token) && nil

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
          connections: @conns.size + @held.size + @returned.size, event_backend: "select", max_connections: @cfg[:max_connections],
          ready: health_ready? }
      end

      def backlog = @lock.synchronize { @ready.size }

      # How long no thread has been waiting for work (0 while one is): the pool's growth signal.
      def saturated_ms
        since = @saturated_since
        @waiting.zero? && since ? ((now - since) * 1000).to_i : 0
      end

      def close
        return if @closed

        stop
        @closed = true
        @reactor&.join(5)
        @health_thread&.join(1)
        @lock.synchronize { (@ready + @held.values).each { |c| close_conn(c) } }
        @conns.each_value { |c| close_conn(c) }
        [@wake_r, @wake_w].each(&:close)
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
        @lock.synchronize do
          token = (@token += 1)
          @held[token] = conn
          @requests += 1
          [token, env_for(conn)]
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
        case (state = answer_probes(conn, advance(conn)))
        when :complete
          conn.pipelined = true
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

      def continue_token(conn)
        @lock.synchronize { (@token += 1).tap { |t| @held[t] = conn } }
      end

      def reset(conn)
        conn.head = conn.chunked = conn.input = conn.stream = conn.started = conn.left = nil
        conn.close = false
        conn.arrival = conn.body_from = conn.body_wait = nil
        conn.deadline = now + @cfg[:keepalive_timeout]
      end

      def wake
        @wake_w.write_nonblock(".", exception: false)
      rescue IOError
        nil
      end

      def reactor
        until @stopping
          adopt_returned
          listening = @cfg[:max_connections].nil? || @conns.size + @held.size + @returned.size < @cfg[:max_connections]
          readers = [@wake_r, *@conns.keys]
          readers.concat(@listeners.map(&:first)) if listening
          timeout = @conns.values.map(&:deadline).compact.min
          wait = timeout && [timeout - now, 0].max
          wait = [wait || 0.1, 0.1].min unless listening # look for room again soon
          ready, = IO.select(readers, nil, nil, wait)
          ready&.each { |io| readable(io) }
          expire(!listening)
        end
        last_reads
      rescue IOError, SystemCallError => e
        warn "margay: the pure-Ruby engine's reactor stopped: #{e.class}: #{e.message}" unless @stopping
      ensure
        @lock.synchronize do
          @reactor_done = true
          @work.broadcast
        end
      end

      # On stop: a request already waiting in the kernel on an idle connection is read and
      # served (its response says connection: close); closed, its client would see a reset.
      def last_reads
        adopt_returned
        @conns.values.each { |conn| receive(conn) } # a read that finds nothing leaves it as it is
      end

      def adopt_returned
        until @returned.empty?
          conn = @returned.pop
          @conns[conn.io] = conn
        end
      end

      def readable(io)
        if io == @wake_r
          @wake_r.read_nonblock(4096, exception: false)
        elsif (listener = @listeners.index { |l| l.first == io })
          accept(listener)
        elsif (conn = @conns[io])
          receive(conn)
        end
      end

      def accept(index)
        io = @listeners[index].first
        8.times do
          client = io.accept_nonblock(exception: false)
          return if client == :wait_readable || client.nil?

          addr = @listeners[index][1] ? "127.0.0.1" : peer(client)
          client.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1) unless @listeners[index][1]
          @conns[client] = Conn.new(client, +"".b, index, addr, nil, nil, nil, now + @cfg[:header_timeout], 0)
          @conns[client].proxy = :pending if @cfg[:proxy_protocol]
        end
      rescue SystemCallError
        nil
      end

      # The client's address as text; an IPv4 client of a dual-stack listener as IPv4.
      def peer(client)
        addr = client.remote_address
        (addr.ipv6? && addr.ipv6_v4mapped? ? addr.ipv6_to_ipv4 : addr).ip_address
      rescue SystemCallError, SocketError
        "127.0.0.1"
      end

      def receive(conn)
        data = conn.io.read_nonblock(READ_SIZE, exception: false)
        return if data == :wait_readable
        return drop(conn) if data.nil?

        conn.arrival ||= now
        conn.deadline = now + @cfg[:header_timeout] if conn.buf.empty? && conn.head.nil?
        conn.buf << data
        case (state = answer_probes(conn, advance(conn)))
        when :complete
          conn.pipelined ||= !conn.buf.empty?
          @conns.delete(conn.io)
          @lock.synchronize do
            @ready << conn
            @work.signal
          end
        when :drop then drop(conn)
        when Integer
          @conns.delete(conn.io)
          send_error(conn, state)
        end
      rescue SystemCallError, IOError, ClientGone
        drop(conn)
      end

      # Parse what +conn+ has buffered: :complete, :more, :drop (close unanswered) or an error status.
      def advance(conn)
        unless conn.head
          return :more if conn.buf.empty?
          return proxy_line(conn) if conn.proxy == :pending

          head = Parser.parse(conn.buf, max_head: @cfg[:max_header_size], max_target: @cfg[:max_request_target],
                                        max_headers: @cfg[:max_headers], methods: @methods)
          return head || :more unless head.is_a?(Parser::Head)

          conn.head = head
          conn.arrival ||= now
          conn.body_from = now
          conn.buf = conn.buf.byteslice(head.length..)
          return 413 if @cfg[:max_body_size] && head.content_length.to_i > @cfg[:max_body_size]

          conn.chunked = Chunked.new(@cfg[:max_body_size], @cfg[:max_chunk_extensions], @cfg[:max_header_size]) if head.chunked
          conn.deadline = now + @cfg[:body_timeout]
          if head.expect_continue && (head.chunked || head.content_length.to_i.positive?)
            conn.io.write("HTTP/1.1 100 Continue\r\n\r\n")
          end
        end
        body(conn)
      end

      # The PROXY v1 line a connection starts with (proxy_protocol): its address kept for every
      # request, the line dropped; anything else closes the connection unanswered.
      def proxy_line(conn)
        result = Proxy.parse(conn.buf)
        return :more if result == 0 # rubocop:disable Style/NumericPredicate -- a status, not a number
        return :drop if result == -1

        conn.proxy = result[1]
        conn.buf = conn.buf.byteslice(result[0]..)
        advance(conn)
      end

      def body(conn)
        head = conn.head
        if conn.chunked
          state = conn.chunked.feed(conn.buf)
          conn.buf = +"".b
          return state unless state == :done

          conn.buf = conn.chunked.rest
          conn.input = conn.chunked.body
        elsif head.content_length
          return :more if conn.buf.bytesize < head.content_length

          conn.input = conn.buf.byteslice(0, head.content_length)
          conn.buf = conn.buf.byteslice(head.content_length..)
        end
        conn.deadline = nil
        conn.body_wait = (now - conn.body_from) * 1000.0 if conn.chunked || head.content_length.to_i.positive?
        :complete
      end

      # Past their deadline: 408 to a request under way, a close to an idle connection. At the
      # connection limit, room for new clients: keep-alive connections idle for 1 s and ones
      # silent for 2 s since their accept are closed, as core/sweep.c does.
      def expire(at_limit)
        t = now
        @conns.values.each do |conn|
          next unless (conn.deadline && conn.deadline <= t) || (at_limit && reclaimable?(conn, t))

          @conns.delete(conn.io)
          conn.arrival && conn.deadline <= t ? send_error(conn, 408) : close_conn(conn)
        end
      end

      def reclaimable?(conn, time)
        return false if conn.arrival || !conn.buf.empty?

        if conn.requests.positive?
          time - (conn.deadline - @cfg[:keepalive_timeout]) >= 1
        else
          time - (conn.deadline - @cfg[:header_timeout]) >= 2
        end
      end

      def drop(conn)
        @conns.delete(conn.io)
        close_conn(conn)
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
