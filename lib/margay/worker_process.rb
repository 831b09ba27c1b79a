# frozen_string_literal: true

require "socket"
require_relative "server"

module Margay
  # Internal: the child side of cluster mode. A worker serves on the
  # inherited listeners and reports to the master through two channels: a
  # heartbeat pipe ("r" once serving, "." every second, "R" when it has served
  # refork_after requests, "M" once it is the mold) and a control socket on
  # which the master sends commands ("mold", "fork INDEX").
  #
  # The mold: a warm worker stops serving (its engine and pool threads are gone
  # before anything forks) and from then on only forks new workers, which
  # share its warmed-up heap copy-on-write. Each is double-forked so that it
  # is not the mold's child; the master gets its pid, heartbeat pipe and
  # control socket over the mold's control socket and watches its pipe.
  class WorkerProcess
    # At most; a quarter of worker_timeout when that is shorter, so that a
    # short timeout never kills a worker whose beat is merely due.
    HEARTBEAT_INTERVAL = 1.0

    # Keep-alive balancing. How long every thread must have been busy before
    # a request waiting on one of our connections is handed to a worker with
    # a free thread (looked at on every tick, about 5 ms); and how long, and
    # how often, before saturated workers even out their connection counts.
    PENDING_AFTER_MS = 1
    EVEN_OUT_AFTER_MS = 5
    EVEN_OUT_INTERVAL = 0.01

    # @param index [Integer] the worker's slot
    # @param beat [IO] write end of the heartbeat pipe
    # @param ctl [UNIXSocket] this side of the control socket
    # @param handoff [UNIXSocket] datagram socket to the master carrying
    #   connection fds in both directions (keep-alive balancing)
    # @param board [Native::IdleBoard] the cluster's count of waiting threads per worker
    def initialize(index:, app:, config:, log:, listeners:, beat:, ctl:, handoff:, board: nil)
      @board = board
      @handoff = handoff
      @last_handoff = 0
      @index = index
      @app = app
      @config = config
      @log = log
      @listeners = listeners
      @beat = beat
      @ctl = ctl
      @server = nil
      @mold_requested = false
      @asked_to_mold = false
      @last_beat = nil
      @orphaned = false
      @terminating = false
      @beat_interval = [HEARTBEAT_INTERVAL, config.worker_timeout / 4.0].min
    end

    # Serve until told to stop (or to become the mold); never returns.
    def run
      $PROGRAM_NAME = "margay: worker #{@index}"
      @config.run_hook(:on_worker_boot, @index)
      idle_board = [@board, @index] if @board && @index < @board.size
      @server = Server.new(@app, @config, log: @log, listeners: @listeners, on_tick: method(:tick),
                                          on_stuck: -> { @server.stop }, idle_board: idle_board)
      %w[TERM INT QUIT].each { |sig| trap(sig) { terminate } }
      %w[TTIN TTOU USR1 USR2 URG].each { |sig| trap(sig, "IGNORE") }
      app_hup = trap("HUP", "IGNORE") # HUP never kills a worker ...
      trap("HUP", app_hup) if app_hup.is_a?(Proc) # ... and an app's own handler (reopening logs) stays
      @server.run
      return_handed_over
      become_mold if @mold_requested && !@terminating
      @config.run_hook(:before_worker_shutdown, @index) # connections are drained; the app is still loaded
      @config.run_hook(:on_worker_shutdown, @index)
      exit!(0)
    rescue Exception => e # rubocop:disable Lint/RescueException -- a child must never return into the master's code
      @log.exception(e, "worker #{@index} failed")
      exit!(1)
    end

    private

    # TERM/INT/QUIT: stop serving, and do not become the mold either, if that
    # was asked for (the master is stopping or replacing this worker).
    def terminate
      @terminating = true
      @server.close_listeners_on_stop!
      @server.stop
    end

    # From the server's supervisor, about every 5 ms.
    def tick
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      if @last_beat.nil? || t - @last_beat >= @beat_interval
        report(@last_beat ? "." : "r")
        @last_beat = t
        ask_to_mold
      end
      command = @ctl.read_nonblock(64, exception: false)
      if command.is_a?(String) && command.include?("mold")
        @mold_requested = true # before balancing: a mold-to-be takes no more hand-overs
        return @server.stop
      end
      balance(t) if @config.balance_keepalive && !@mold_requested
    end

    # Keep-alive balancing (Native::IdleBoard counts every worker's waiting
    # threads and connections). While our threads are all busy:
    # - a request already waiting on one of our idle connections, unread in
    #   the kernel, goes to another worker when one has a thread waiting (at
    #   most as many connections as those threads);
    # - when no worker has one, a worker serving far more connections than
    #   another hands over half the gap of its idle connections (evening out).
    # Hand-overs go through the master; connections handed to us are adopted.
    # Nothing is lost: a request already sent waits in the socket's kernel buffer.
    def balance(t)
      saturated = @server.saturated_ms
      free = @server.others_waiting if saturated >= PENDING_AFTER_MS
      if free&.positive?
        @server.detach_idle(free, pending_only: true).each { |fd, kept_alive| pass_on(fd, kept_alive) }
      elsif saturated >= EVEN_OUT_AFTER_MS && t - @last_handoff >= EVEN_OUT_INTERVAL
        quota = @server.handoff_quota
        if quota.positive?
          @last_handoff = t
          @server.detach_idle(quota).each { |fd, kept_alive| pass_on(fd, kept_alive) }
        end
      end
      while @handoff.wait_readable(0)
        io, kept_alive = Cluster.recv_connection(@handoff)
        io.autoclose = false # the engine owns the descriptor now
        @server.adopt(io.fileno, kept_alive)
      end
    rescue IOError, SystemCallError, SocketError => e
      @log.warn("worker #{@index}: keep-alive hand-over failed: #{e.message}")
    end

    # Hand an idle connection to the master; if the master's queue is full,
    # keep serving it here (never block the thread that writes heartbeats).
    def pass_on(fd, kept_alive)
      io = IO.for_fd(fd, autoclose: true)
      return if Cluster.send_connection_nonblock(@handoff, io, kept_alive)

      io.autoclose = false
      @server.adopt(fd, kept_alive)
    ensure
      io&.close if io&.autoclose?
    end

    # Connections the master handed to this worker after it stopped taking
    # them: back to the master, which passes them to a worker still serving.
    def return_handed_over
      while @handoff.wait_readable(0)
        io, kept_alive = Cluster.recv_connection(@handoff)
        Cluster.send_connection_nonblock(@handoff, io, kept_alive)
        io.close
      end
    rescue IOError, SystemCallError, SocketError
      nil
    end

    def ask_to_mold
      limit = @config.refork_after
      return if @asked_to_mold || limit.nil? || @server.stats[:requests] < limit

      @asked_to_mold = true
      report("R")
    end

    # Write to the heartbeat pipe. A broken pipe means the master is gone
    # (killed, or crashed): nobody supervises this worker any more, so it
    # finishes its requests in flight and exits instead of serving on alone.
    def report(byte)
      @beat.write_nonblock(byte, exception: false)
    rescue Errno::EPIPE, IOError
      return if @orphaned

      @orphaned = true
      @log.warn("worker #{@index}: the master is gone: finishing requests in flight, then exiting")
      terminate
    end

    # ---- the mold ----

    def become_mold
      $PROGRAM_NAME = "margay: mold (from worker #{@index})"
      %w[TERM INT QUIT].each { |sig| trap(sig) { exit!(0) } }
      exit!(0) if @terminating # told to stop while it was draining
      GC.start # settle the heap once, so children share it instead of copying it on their first GC
      @beat.write("M")
      loop do
        ready, = IO.select([@ctl], nil, nil, @beat_interval)
        @beat.write_nonblock(".", exception: false)
        next unless ready

        line = @ctl.gets
        exit!(0) if line.nil? # the master is gone
        fork_worker(Integer(line[/\Afork (\d+)/, 1])) if line.start_with?("fork ")
      end
    rescue Errno::EPIPE, IOError
      exit!(0) # the master is gone: a mold has nothing to finish
    end

    # Double fork: the new worker is re-parented away from the mold; the
    # middle process reports it to the master and exits at once.
    # The answer is one message (the pid, the master's ends attached), so the
    # master gets all of it or nothing. before_fork runs here, in the process
    # that forks (the master runs it only for its own forks).
    def fork_worker(index)
      @config.run_hook(:before_fork, index)
      beat_r, beat_w = IO.pipe
      master_end, child_end = UNIXSocket.pair
      hand_master, hand_child = UNIXSocket.pair(:DGRAM)
      middle = fork do
        pid = fork do
          [beat_r, master_end, hand_master, @ctl, @beat, @handoff].each(&:close)
          WorkerProcess.new(index: index, app: @app, config: @config, log: @log, listeners: @listeners,
                            beat: beat_w, ctl: child_end, handoff: hand_child, board: @board).run
        ensure
          exit!(1) # run never returns; whatever raised before it must not run the mold's code
        end
        @ctl.sendmsg("#{pid}\n", 0, nil, Socket::AncillaryData.unix_rights(beat_r, master_end, hand_master))
      ensure
        exit!(0)
      end
      Process.wait(middle)
    rescue StandardError => e # a fork or hook failure: the master's wait for the answer times out
      @log.exception(e, "mold: cannot fork worker #{index}")
    ensure
      [beat_r, beat_w, master_end, child_end, hand_master, hand_child].each { |io| io&.close }
    end
  end
end
