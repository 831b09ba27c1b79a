# frozen_string_literal: true

require_relative "../clock"
require_relative "../log"
require_relative "../process/systemd"
require_relative "../runner" # BACKTRACE_SIGNAL, TLS_RELOAD_SIGNAL

module Margay
  class Cluster
    # Internal: the master's signal inbox. A trap only queues its signal and
    # wakes the supervision loop through a self-pipe; the loop takes them one
    # at a time (docs/SIGNALS.md says what each does). A worker forked while
    # signals arrive inherits these traps until it installs its own: what
    # they queued in the child after the fork is the child's own (see
    # #in_worker).
    class Signals
      MASTER = [*%w[TERM INT QUIT TTIN TTOU USR1 USR2 HUP URG], Runner::TLS_RELOAD_SIGNAL, *Runner::BACKTRACE_SIGNAL].freeze
      STOP = %w[TERM INT QUIT].freeze

      # The self-pipe's read end: readable once a signal was queued.
      attr_reader :wake

      def initialize
        @queue = []
        @wake, @wake_w = IO.pipe
        @own_traps = {}
        @app_traps = {}
      end

      # Trap every master signal into the inbox. Called when the master starts
      # and again once the app is loaded: a handler the app set meanwhile (say,
      # HUP to reopen its logs) is kept for the workers.
      def trap_all
        MASTER.each do |sig|
          previous = trap(sig, @own_traps[sig] ||= proc { request(sig) })
          @app_traps[sig] = previous if previous.is_a?(Proc) && !previous.equal?(@own_traps[sig])
        end
      end

      # Queue +sig+ (a name of MASTER) as if it had arrived (trap-safe).
      def request(sig)
        @queue << sig
        @wake_w.write_nonblock(".", exception: false)
      rescue IOError
        nil
      end

      # Empty the self-pipe (its bytes only wake the loop).
      def drain_wake
        @wake.read_nonblock(1024, exception: false)
      end

      # The oldest queued signal (removed from the queue), or nil.
      def shift
        @queue.shift
      end

      # Whether a stop (TERM, INT, QUIT) is queued.
      def stop_queued?
        @queue.intersect?(STOP)
      end

      # How many signals are queued: taken just before a fork, it tells the
      # new worker which of them came after.
      def mark
        @queue.size
      end

      # In a newly forked worker, before it loads anything. Until Worker
      # installs its own handlers, a stop ends it at once and the other master
      # signals are ignored (HUP goes to the app's own handler, if it has
      # one). The signals queued after +mark+ (by the master's traps, still
      # in place in the child) were sent to it: a stop among them ends it at
      # once, a HUP is delivered again to the app's handler.
      def in_worker(mark)
        [@wake, @wake_w].each(&:close)
        STOP.each { |sig| trap(sig) { exit!(0) } }
        (MASTER - STOP).each { |sig| trap(sig, "IGNORE") }
        app_hup = @app_traps["HUP"]
        trap("HUP", app_hup) if app_hup.is_a?(Proc)
        own = @queue.drop(mark)
        exit!(0) if own.intersect?(STOP)
        Process.kill(:HUP, Process.pid) if own.include?("HUP") && app_hup.is_a?(Proc)
      end
    end
  end

  # What each master signal does (docs/SIGNALS.md): the supervision loop takes them from the
  # inbox one at a time. Restarts (USR1, USR2) are in restarts.rb.
  class Cluster
    private

    def handle_signal(sig)
      case sig
      when "TERM" then @config.drain_delay.positive? && !@drain_until ? begin_drain : begin_stop
      when *Signals::STOP then begin_stop
      when "TTIN" then @target += 1
      when "TTOU" then shrink
      when "USR1" then phased_restart
      when "USR2" then hot_restart
      when "HUP" then hangup
      when Runner::BACKTRACE_SIGNAL then @log.thread_backtraces # the master's threads, as Puma's
      when Runner::TLS_RELOAD_SIGNAL then reload_tls_everywhere
      when "URG" then promote(@workers.serving.select { |w| w.booted? && !w.retiring? }.min_by(&:index))
      end
    end

    def begin_stop
      return if @stopping

      @stopping = true # first: whatever fails below, the stop goes on (and is forced at the deadline)
      @stop_deadline = Clock.now + grace_period + 5
      Systemd.notify("STOPPING=1")
      @forwarder.close_held # no worker will serve again
      @log.info("master: graceful stop (#{@workers.size} workers)")
      signal_workers(:TERM)
      close_listeners # the workers close theirs as they stop: then new clients are refused
    end

    # TERM with drain_delay: every worker turns unready and closes each connection after its
    # response (the board's drain flag, which their engines read), the listeners keep accepting;
    # after drain_delay the graceful stop. A second TERM, or INT, stops at once.
    def begin_drain
      return if @stopping

      @drain_until = Clock.now + @config.drain_delay
      @board.drain!
      @log.info("master: draining for #{@config.drain_delay}s (not ready, connection: close), then stopping gracefully")
    end

    def close_listeners
      (@listeners + health_listeners).each { |l| l.io.close unless l.io.closed? }
    end

    def force_stop
      @workers.each { |w| w.kill(:KILL) }
    end

    def signal_workers(sig)
      @workers.each { |w| sig == :TERM ? stop_worker(w) : w.kill(sig) }
    end

    def shrink
      return if @target <= 1

      @target -= 1
      victim = @workers.cull(@config.worker_culling_strategy)
      retire(victim) if victim
    end

    # HUP: reopen the redirected stdout/stderr (here and, through their own
    # HUP handler, in the workers), and pass the signal to the workers. A file
    # that cannot be opened (its directory gone, no permission, no descriptor)
    # is said and the logs stay where they were: HUP never stops the cluster.
    def hangup
      Log.reopen(@config, @log, "master: ")
      signal_workers(:HUP)
    end

    # ALRM: the master's TLS contexts take the new certificates (the workers it forks from now
    # on inherit them), and each worker reloads its own copies.
    def reload_tls_everywhere
      reload_tls("master: ")
      signal_workers(Runner::TLS_RELOAD_SIGNAL.to_sym)
    end
  end
end
