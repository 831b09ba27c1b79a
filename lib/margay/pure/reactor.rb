# frozen_string_literal: true

require "socket"
require_relative "poller"

module Margay
  module Pure
    # The pure engine's reactor thread (#reactor, started by Engine#start): it watches the
    # listeners and the connections no pool thread holds (Poller: nio4r, else IO.select), accepts, reads heads
    # and whole bodies, judges them as the C parser does, hands complete requests to the ready
    # list, and closes what the header, body and keep-alive timeouts expire. Mixed into Engine
    # (its connections, locks, settings and clock).
    module Reactor
      # A client connection; +head+ and +input+ describe its current request.
      Conn = Struct.new(:io, :buf, :listener, :addr, :head, :chunked, :input, :deadline, :requests, :arrival,
                        :started, :close, :stream, :left, :proxy, :pipelined,
                        :body_from, :body_wait, :queued, :taken)

      READ_SIZE = 16_384
      LET_GO_WAIT = 2 # seconds Engine#stop waits for the reactor to let go of the listeners

      private

      def reset(conn)
        conn.head = conn.chunked = conn.input = conn.stream = conn.started = conn.left = nil
        conn.close = false
        conn.arrival = conn.body_from = conn.body_wait = conn.queued = nil
        conn.deadline = now + @cfg[:keepalive_timeout]
      end

      def wake = @poller.wakeup

      # The calling thread's buffer to read into (copied out at once): no fresh 16 KB per read.
      def read_buffer = Thread.current[:margay_pure_read] ||= String.new(capacity: READ_SIZE, encoding: Encoding::BINARY)

      def reactor
        listening = false
        until @stopping
          adopt_returned
          room = @cfg[:max_connections].nil? || @open.get < @cfg[:max_connections]
          listen(room) if room != listening
          listening = room
          wait = @next_deadline && [@next_deadline - now, 0].max
          wait = [wait || 0.1, 0.1].min unless listening # look for room again soon
          poll(wait).each { |io| readable(io) }
          expire(!listening)
        end
        release_listeners
        last_reads
      rescue IOError, SystemCallError => e
        warn "margay: the pure-Ruby engine's reactor stopped: #{e.class}: #{e.message}" unless @stopping
      ensure
        listeners_let_go!
        @reactor_done = true
        close_ready
      end

      def listen(on)
        @listeners.each { |listener| on ? @poller.add(listener.first) : @poller.remove(listener.first) }
      end

      # Stopping: the listeners leave the poller, and one more wait makes java.nio let go of them,
      # so that the server's closing a listener closes its socket at once (a new client is refused
      # during the grace period) rather than when the poller closes. Engine#stop returns after
      # this (the server closes the listeners next): a listener closed during this wait may stay
      # open, registered, until the next wait, and there is none.
      def release_listeners
        @listeners.each { |listener| @poller.release(listener.first) }
        poll(0)
      ensure
        listeners_let_go!
      end

      # The wait raises IOError when an IO it watches was closed before or during the call: a
      # listener, when the reactor took longer than Engine#stop waits for it. Stopping, that ends
      # the loop and the stop's last reads still run.
      def poll(wait)
        @poller.wait(wait)
      rescue IOError
        raise unless @stopping

        []
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
          watch(conn)
        end
      end

      # The reactor watches +conn+ until it has a complete request (or is closed).
      def watch(conn)
        @conns[conn.io] = conn
        @poller.add(conn.io)
        next_deadline(conn.deadline)
      end

      # The earliest deadline among the watched connections is at or after +@next_deadline+:
      # #expire looks at them all only once it has passed.
      def next_deadline(time)
        @next_deadline = time if time && (@next_deadline.nil? || time < @next_deadline)
      end

      def unwatch(conn)
        @conns.delete(conn.io)
        @poller.remove(conn.io)
      rescue IOError
        nil
      end

      def readable(io)
        if (listener = @listeners.index { |l| l.first == io })
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
          conn = Conn.new(client, +"".b, index, addr, nil, nil, nil, now + @cfg[:header_timeout], 0)
          conn.proxy = :pending if @cfg[:proxy_protocol]
          @open.incrementAndGet
          watch(conn)
        end
      rescue SystemCallError
        nil
      rescue IOError # closed after the wait found it ready: the reactor took longer than a stop waits
        raise unless @stopping
      end

      # The client's address as text; an IPv4 client of a dual-stack listener as IPv4.
      def peer(client)
        addr = client.remote_address
        (addr.ipv6? && addr.ipv6_v4mapped? ? addr.ipv6_to_ipv4 : addr).ip_address
      rescue SystemCallError, SocketError
        "127.0.0.1"
      end

      def receive(conn)
        data = conn.io.read_nonblock(READ_SIZE, read_buffer, exception: false)
        return if data == :wait_readable
        return drop(conn) if data.nil?

        conn.arrival ||= now
        conn.deadline = now + @cfg[:header_timeout] if conn.buf.empty? && conn.head.nil?
        conn.buf << data
        case (state = answer_probes(conn, advance(conn)))
        when :complete
          conn.pipelined ||= !conn.buf.empty?
          unwatch(conn)
          @ready.push(conn)
        when :drop then drop(conn)
        when Integer
          unwatch(conn)
          send_error(conn, state)
        else next_deadline(conn.deadline)
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
        return unless at_limit || (@next_deadline && @next_deadline <= t)

        @next_deadline = nil
        @conns.values.each do |conn|
          next next_deadline(conn.deadline) unless (conn.deadline && conn.deadline <= t) ||
                                                   (at_limit && reclaimable?(conn, t))

          unwatch(conn)
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
        unwatch(conn)
        close_conn(conn)
      end
    end
  end
end
