# frozen_string_literal: true

require_relative "../clock"

module Margay
  class Cluster
    # Internal: what the master does once a worker process is gone. It reaps
    # the exit statuses of its children (#reap: the workers, the mold, and as
    # child subreaper the workers the mold forked), forgets a worker that is
    # gone (#forget: out of the roster, what it handed over drained, its
    # links closed, its idle board slots cleared, its exit logged, a boot
    # failure backed off), and owns the after_worker_shutdown bookkeeping:
    # the hook runs once the worker's exit status is collected (its pipe's
    # EOF usually comes first), or a second later without one (a process
    # that is not the master's child), or at once on #report(flush: true).
    class Exits
      # What Puma's after_worker_shutdown hook receives about a worker that
      # exited (the methods of Puma's WorkerHandle that still mean something
      # then). process_status: its Process::Status, nil when the master could
      # not collect it (a worker the mold forked, on a system without a
      # child subreaper).
      ExitedWorker = Struct.new(:index, :pid, :process_status, :booted, keyword_init: true) do
        def booted?
          booted
        end

        # Always true: it is gone.
        def term?
          true
        end

        # Phases are not counted by Margay.
        def phase
          0
        end
      end

      # @param config [Configuration] its after_worker_shutdown hook
      # @param log [Log]
      # @param roster [Roster] the master's workers: a gone one leaves it
      # @param forwarder [Balancer::Forwarder] drains what a gone worker handed over
      # @param board [Native::IdleBoard] a gone worker's counters are cleared
      # @param back_off [BackOff] told when a worker exits before it served
      # @param clock [#now] Margay::Clock (a test gives its own)
      def initialize(config:, log:, roster:, forwarder:, board:, back_off:, clock: Clock)
        @clock = clock
        @config = config
        @log = log
        @roster = roster
        @forwarder = forwarder
        @board = board
        @back_off = back_off
        @pending = {} # pid => [ExitedWorker, since]: after_worker_shutdown waits for the exit status
      end

      # Collect the exit statuses of children; the heartbeat pipe's EOF
      # usually told the master already. +stopping+: the cluster stops (exits
      # are not logged).
      def reap(stopping:)
        loop do
          pid, status = Process.wait2(-1, Process::WNOHANG)
          break unless pid

          worker = @roster[pid]
          forget(worker, status, stopping: stopping) if worker
          @pending[pid][0].process_status ||= status if @pending[pid] # its pipe's EOF came first
        end
      rescue Errno::ECHILD
        nil
      end

      # +worker+ (a WorkerRecord) is gone, with +status+ (nil: not collected
      # yet). Nothing when it was forgotten already.
      def forget(worker, status, stopping:)
        return unless @roster.delete(worker)

        exited(worker, status)
        @forwarder.drain(worker) # what it handed over (or back) before it exited
        worker.channel.close
        @board.clear(worker.index) if !worker.mold? && worker.index < @board.size # a killed worker cannot count itself out
        return if worker.stopping? && (status.nil? || status.success?)

        what = worker.mold? ? "the mold" : "worker #{worker.index}"
        @log.warn("master: #{what} (pid #{worker.pid}) exited#{status ? ": #{status.inspect}" : ''}") unless stopping
        return if worker.booted? || worker.mold?

        @back_off.failed! # it never got to serve
      end

      # Run after_worker_shutdown for the exits whose status is known, or
      # waited for long enough (+flush+: all of them, before a stop or an exec).
      def report(flush: false)
        @pending.delete_if do |pid, (handle, since)|
          handle.process_status ||= collect_status(pid, wait: flush ? 1.0 : 0) # at the end: its pipe closed, its exit follows
          next false unless handle.process_status || flush || @clock.now - since > 1

          @config.run_hook(:after_worker_shutdown, handle, log: @log)
          true
        end
      end

      private

      def exited(worker, status)
        return if worker.mold? || @config.hooks[:after_worker_shutdown].nil?

        handle = ExitedWorker.new(index: worker.index, pid: worker.pid, process_status: status, booted: worker.booted?)
        @pending[worker.pid] = [handle, @clock.now]
        report
      end

      def collect_status(pid, wait: 0)
        deadline = @clock.now + wait
        loop do
          status = Process.wait2(pid, Process::WNOHANG)&.last
          return status if status || @clock.now >= deadline

          sleep 0.01
        end
      rescue Errno::ECHILD
        nil
      end
    end
  end
end
