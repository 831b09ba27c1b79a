# frozen_string_literal: true

require_relative "../process/binder"
require_relative "channel"

module Margay
  class Cluster
    # Internal: keep-alive balancing, the worker's side. Native::IdleBoard
    # counts every worker's waiting threads and connections; the engine reads
    # it (Engine#others_waiting, #handoff_quota). While all of this worker's
    # threads are busy:
    # - a request already waiting on one of its idle connections, unread in
    #   the kernel, goes to another worker when one has a thread waiting (at
    #   most as many connections as those threads);
    # - when no worker has one, a worker serving far more connections than
    #   another hands over half the gap of its idle connections (evening out).
    # Hand-overs go through the master (Balancer::Forwarder); connections
    # handed to this worker are adopted. Nothing is lost: a request already
    # sent waits in the socket's kernel buffer.
    #
    # While the cluster drains (and whatever balance_keepalive says), a
    # saturated worker hands over every connection whose request waits unread,
    # also when no worker has a thread free: the master holds it until one
    # has. A worker may be killed mid-drain (a deploy, the OOM killer), and a
    # request it holds unread would be reset with it.
    class Balancer
      # How long every thread must have been busy before a request waiting on
      # one of our connections is handed to a worker with a free thread
      # (looked at on every tick, about 5 ms); and how long, and how often,
      # before saturated workers even out their connection counts.
      PENDING_AFTER_MS = 1
      EVEN_OUT_AFTER_MS = 5
      EVEN_OUT_INTERVAL = 0.01
      # While draining: connections with a request waiting handed over per
      # tick at most (Engine#detach_idle looks at 64 per call).
      DRAIN_HANDOFF = 64

      # @param server [Server] the worker's server (its engine does the work)
      # @param channel [Channel] the worker's side of its links to the master
      # @param log [Log]
      # @param index [Integer] the worker's slot (for the log)
      def initialize(server:, channel:, log:, index:)
        @server = server
        @channel = channel
        @log = log
        @index = index
        @last_handoff = 0
      end

      # One look, from the worker's tick (+now+: Clock.now): hand idle
      # connections over if this worker is saturated, adopt those handed to it.
      # +keepalive+ (balance_keepalive): balance outside a drain too.
      def balance(now, keepalive: true)
        engine = @server.engine
        return unless engine # the server has not started: nothing to balance

        draining = engine.draining?
        return unless keepalive || draining

        saturated = engine.saturated_ms
        free = (draining ? DRAIN_HANDOFF : engine.others_waiting) if saturated >= PENDING_AFTER_MS
        if free&.positive?
          engine.detach_idle(free, true).each { |fd, kept_alive| pass_on(engine, fd, kept_alive) }
        elsif saturated >= EVEN_OUT_AFTER_MS && now - @last_handoff >= EVEN_OUT_INTERVAL && !draining
          quota = engine.handoff_quota
          if quota.positive?
            @last_handoff = now
            engine.detach_idle(quota, false).each { |fd, kept_alive| pass_on(engine, fd, kept_alive) }
          end
        end
        while @channel.connection_waiting?
          io, kept_alive = @channel.recv_connection
          io.autoclose = false # the engine owns the descriptor now
          engine.adopt(io.fileno, kept_alive)
        end
      rescue IOError, SystemCallError, SocketError => e # IOError: the engine closed meanwhile
        @log.warn("worker #{@index}: keep-alive hand-over failed: #{e.message}")
      end

      # Once the server stopped: connections the master handed to this worker
      # after it stopped taking them go back to the master, which passes them
      # to a worker still serving.
      def return_handed_over
        while @channel.connection_waiting?
          io, kept_alive = @channel.recv_connection
          @channel.send_connection_nonblock(io, kept_alive)
          io.close
        end
      rescue IOError, SystemCallError, SocketError
        nil
      end

      private

      # Hand an idle connection to the master; if the master's queue is full,
      # keep serving it here (never block the thread that writes heartbeats).
      def pass_on(engine, fd, kept_alive)
        io = IO.for_fd(fd, autoclose: true)
        return if @channel.send_connection_nonblock(io, kept_alive)

        io.autoclose = false
        engine.adopt(fd, kept_alive)
      ensure
        io&.close if io&.autoclose?
      end

      # Internal: keep-alive balancing, the master's side. A saturated worker
      # handed over an idle connection: pass it to the serving worker with the
      # fewest connections (round robin among equals), or back to it if there
      # is no other. Never blocks: a worker that does not take its hand-overs
      # (stuck) must not stall the master, so the connection then goes to the
      # next one.
      #
      # Nothing is lost when no worker can take a connection (its client's
      # request may already wait in the kernel): during a hot restart every
      # worker is stopping, and a connection handed over just before is held
      # here, at most MAX_HELD, until a worker serves again; across the hot
      # restart's exec the held connections go to the new master with the
      # listeners (INHERIT_ENV). While the cluster drains, a connection goes
      # only to a worker with a thread waiting (the board says), else it is
      # held here until one has: a worker killed mid-drain then holds no
      # request it has not started.
      class Forwarder
        MAX_HELD = 256
        INHERIT_ENV = Binder::INHERIT_CONNECTIONS_ENV

        # @param roster [Roster] the master's workers
        # @param board [Native::IdleBoard] the cluster's idle board (connection counts)
        # @param log [Log]
        # @param env [Hash] where a re-executed master finds the connections it inherits
        # @param max_held [Integer] connections held at most while no worker serves
        def initialize(roster:, board:, log:, env: ENV, max_held: MAX_HELD)
          @roster = roster
          @max_held = max_held
          @board = board
          @log = log
          @turn = 0
          @held = inherited(env.delete(INHERIT_ENV))
        end

        # Connections no worker could take yet.
        def held
          @held.size
        end

        # Receive one connection +from+ a worker (its WorkerRecord) and pass it on.
        def forward(from)
          io, kept_alive = from.channel.recv_connection
          place(io, kept_alive, from) ? io.close : hold(io, kept_alive)
        rescue StandardError => e # SocketError: a datagram without its descriptor (EMFILE)
          io&.close
          @log.warn("master: keep-alive hand-over failed: #{e.message}")
        end

        # Everything +from+ sent and the master has not read yet: before the
        # master forgets a worker (closing its socket would drop them).
        def drain(from)
          forward(from) while from.channel.connection_waiting?
        end

        # Pass held connections to workers that serve again (the master's loop).
        def place_held
          @held.reject! do |io, kept_alive|
            next false unless place(io, kept_alive, nil)

            io.close
            true
          end
        end

        # Close every held connection: on a stop (no worker will serve again),
        # and in a forked worker, whose copies would keep those sockets open
        # after the worker that adopted one closed it (no FIN for its client).
        def close_held
          @held.each { |io, _| io.close unless io.closed? }
          @held.clear
        end

        # A master re-executed into single mode has no worker to give inherited
        # connections to: close them (their clients see the connection end).
        def self.close_inherited(env = ENV)
          env.delete(INHERIT_ENV).to_s.split(",").each do |entry|
            IO.for_fd(Integer(entry[/\A\d+/], 10)).close
          rescue ArgumentError, TypeError, SystemCallError
            nil
          end
        end

        # For a hot restart's exec: [env, fd map] handing the held connections
        # to the new master (the fds stay open across exec).
        def exec_handover
          return [{}, {}] if @held.empty?

          env = { INHERIT_ENV => @held.map { |io, kept_alive| "#{io.fileno}:#{Channel::KEPT_ALIVE.fetch(kept_alive)}" }.join(",") }
          [env, @held.to_h { |io, _| [io.fileno, io.fileno] }]
        end

        private

        # Send to the serving worker with the fewest connections that takes it
        # (+from+ itself when it is the only one serving). False: none did.
        def place(io, kept_alive, from)
          others = @roster.serving.select(&:booted?) - [from]
          others << from if from && others.empty? && !from.stopping? && !from.mold?
          others.select! { |w| waiting_in(w).positive? } if @board.draining?
          return false if others.empty?

          others.rotate!((@turn += 1) % others.size)
          others = others.each_with_index.sort_by { |w, i| [connections_of(w), i] }.map(&:first) # fewest first
          others.any? { |w| w.channel.send_connection_nonblock(io, kept_alive) }
        end

        def hold(io, kept_alive)
          return @held << [io, kept_alive] if @held.size < @max_held

          io.close
          @log.warn("master: no worker took a handed-over connection and #{@max_held} wait already: closed")
        end

        def inherited(value)
          value.to_s.split(",").filter_map do |entry|
            fd, kind = entry.split(":")
            [Socket.for_fd(Integer(fd, 10)).tap { |io| io.close_on_exec = true }, kind == Channel::KEPT_ALIVE[true]]
          rescue ArgumentError, SystemCallError => e
            @log.warn("master: inherited connection #{entry.inspect} unusable (#{e.message})")
            nil
          end
        end

        def connections_of(worker)
          worker.index < @board.size ? @board.connections(worker.index) : 0
        end

        def waiting_in(worker)
          worker.index < @board.size ? @board[worker.index] : 0
        end
      end
    end
  end
end
