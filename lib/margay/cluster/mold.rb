# frozen_string_literal: true

require_relative "channel"
require_relative "heap"
require_relative "fork_gate"

module Margay
  class Cluster
    # Internal: the mold. A warm worker stopped serving (Worker#become_mold),
    # settled its heap (Heap.settle: full GCs, compaction, malloc_trim) and
    # forks new workers when the master orders them; they share its
    # warmed-up heap copy-on-write. Each is double-forked so that it is not
    # the mold's child (on Linux the master, a child subreaper, adopts it);
    # the master gets its pid and the master's ends of its links in the
    # mold's answer and watches it like any worker. Once the workers are
    # re-forked, the master tells it to serve again: #run returns and the
    # process is a worker once more (as Puma's worker 0 after a refork), so
    # no process sits idle holding a copy of the heap.
    class Mold
      # @param index [Integer] the slot of the worker it was
      # @param config [Configuration]
      # @param log [Log]
      # @param channel [Channel] the worker's side of its links to the master
      # @param beat_interval [Float] seconds between heartbeats
      # @param hook_data [Hash] the worker's per-key hook data (Configuration::Hook)
      def initialize(index:, config:, log:, channel:, beat_interval:, hook_data: {})
        @index = index
        @hook_data = hook_data
        @config = config
        @log = log
        @channel = channel
        @beat_interval = beat_interval
      end

      # Settle the heap, report ready, then fork the workers the master
      # orders; returns when the master tells it to serve again (exits when
      # the master is gone). The block runs in each new worker, with its
      # index and its Channel, and must not return (Worker#run).
      def run(&start_worker)
        Heap.settle(compact: @config.compact_before_fork, room: @config.heap_room_before_fork, log: @log,
                    who: "mold (from worker #{@index})")
        @channel.report!(:mold_ready)
        loop do
          ordered = @channel.order_waiting?(@beat_interval)
          @channel.report(:alive)
          next unless ordered

          order = @channel.next_order
          return hook(:after_refork, nil) if order == :serve # Puma's moment: all re-forked, about to serve again

          double_fork(order, &start_worker) if order
        end
      rescue Errno::EPIPE, IOError # EOFError too: the master is gone, and a mold has nothing to finish
        exit!(0)
      end

      private

      def hook(name, *args)
        @config.run_hook(name, *args, log: @log, data: @hook_data)
      end

      # Fork worker +index+ twice over: the new worker is re-parented away
      # from the mold; the middle process answers the master and exits at
      # once. The fork hooks run here, in the process that forks (as in
      # Puma's fork_worker, where worker 0 runs them): before_worker_fork and
      # after_worker_fork around the fork.
      def double_fork(index)
        hook(:before_worker_fork, index)
        master_side, worker_side = Channel.pair
        gate = ForkGate.new # the worker boots after this process ran after_worker_fork
        middle = fork do
          pid = fork do
            [master_side, @channel].each(&:close)
            gate.wait
            yield index, worker_side
          ensure
            exit!(1) # the worker never returns; whatever raised before it ran must not run the mold's code
          end
          @channel.answer_order(pid, master_side)
        ensure
          exit!(0)
        end
        gate.forked
        Process.wait(middle)
        hook(:after_worker_fork, index)
      rescue StandardError => e # a fork or hook failure: the master's wait for the answer times out
        @log.exception(e, "mold: cannot fork worker #{index}")
      ensure
        gate&.open
        [master_side, worker_side].each { |side| side&.close }
      end
    end
  end
end
