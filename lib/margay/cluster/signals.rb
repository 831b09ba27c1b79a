# frozen_string_literal: true

require_relative "../runner" # BACKTRACE_SIGNAL

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
end
