# frozen_string_literal: true

require_relative "../clock"
require_relative "channel"
require_relative "fork_gate"
require_relative "worker"
require_relative "worker_record"

module Margay
  class Cluster
    # Internal: how the master makes a worker. Either it forks one itself
    # (#fork_child), or it orders one from the ready mold (#order_from_mold),
    # which forks it from its warm heap. Either way the new worker enters the
    # roster, watched through its links like every other. The master decides
    # when, and which index (Roster#free_index).
    class Spawner
      # @param config [Configuration]
      # @param log [Log]
      # @param listeners [Array<Binder::Listener>] the master's, inherited by each worker
      # @param roster [Roster] the master's workers: new ones are added to it
      # @param signals [Signals] the master's signal inbox (a forked worker sheds it)
      # @param board [Native::IdleBoard] the cluster's idle board, shared with every worker
      # @param app [#call, nil] the app, when the master preloaded it
      # @param app_loader [#call] loads the app in each new worker otherwise
      # @param forwarder [Balancer::Forwarder] its held connections are the master's alone
      # @param health_listeners [Array<Binder::Listener>] the master's health listeners, inherited too
      def initialize(config:, log:, listeners:, roster:, signals:, board:, app:, app_loader:, forwarder:,
                     health_listeners: [])
        @forwarder = forwarder
        @config = config
        @log = log
        @listeners = listeners
        @health_listeners = health_listeners
        @roster = roster
        @signals = signals
        @board = board
        @app = app
        @app_loader = app_loader
      end

      # Fork worker +index+ from the master. Returns its record; raises
      # SystemCallError when the process or its links cannot be made (fork:
      # EAGAIN, ENOMEM; pipes: EMFILE). The caller runs before_worker_fork
      # before it, and after_worker_fork in the block: the worker starts
      # booting once the block has returned (ForkGate).
      def fork_child(index)
        master_side, worker_side = Channel.pair
        gate = ForkGate.new
        mark = @signals.mark
        pid = fork do
          master_side.close
          gate.wait
          worker_main(index, mark, worker_side)
        end
        gate.forked
        worker_side.close
        record = add(index, pid, master_side)
        yield record if block_given?
        record
      rescue SystemCallError
        [master_side, worker_side].each { |side| side&.close }
        raise
      ensure
        gate&.open
      end

      # Order worker +index+ from +mold+ (the ready mold's record; the mold
      # runs the fork hooks itself: it is the process that forks). Returns the
      # new worker's record, or nil when the mold failed (logged: the caller
      # drops the mold).
      def order_from_mold(mold, index)
        mold.channel.order_fork(index)
        pid, channel = mold.channel.receive_answer
        add(index, pid, channel)
      rescue StandardError => e # the mold died (EOF), or answered nonsense
        kill_unsupervised(e.pid) if e.is_a?(MoldAnswerError) && e.pid
        @log.error("master: forking from the mold failed (#{e.message}): dropping the mold")
        nil
      end

      private

      # The first code of a forked worker; never returns into the master's
      # code. It closes what belongs to the master, sheds the master's
      # signal handling (Signals#in_worker), and runs the Worker (which
      # loads the app unless it was preloaded).
      def worker_main(index, mark, channel)
        @roster.close_channels
        @forwarder.close_held # a copy here would keep those sockets open after their worker closed them
        @signals.in_worker(mark)
        Worker.new(index: index, app: @app, app_loader: @app_loader, config: @config, log: @log, listeners: @listeners,
                   health_listeners: @health_listeners, board: @board, channel: channel).run
      rescue Exception => e # rubocop:disable Lint/RescueException -- a child must never return into the master's code
        @log.exception(e.cause || e, "worker #{index} failed to boot")
        exit!(1)
      end

      def add(index, pid, channel)
        @roster.add(WorkerRecord.new(index: index, pid: pid, channel: channel, now: Clock.now))
      end

      # A worker the mold forked but the master could not take in: nobody
      # would supervise it. (EPERM: the pid now belongs to someone else.)
      def kill_unsupervised(pid)
        Process.kill(:KILL, pid)
      rescue Errno::ESRCH, Errno::EPERM
        nil
      end
    end
  end
end
