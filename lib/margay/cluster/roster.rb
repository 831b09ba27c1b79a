# frozen_string_literal: true

require_relative "worker_record"

module Margay
  class Cluster
    # Internal: the master's set of workers (WorkerRecords by pid, the mold
    # among them), and the questions the supervision loop asks of it.
    class Roster
      include Enumerable

      def initialize
        @by_pid = {}
        @starts = Hash.new(0) # index => workers added with it
      end

      # Each record, in the order the workers were added.
      def each(&block)
        return enum_for(:each) unless block

        @by_pid.each_value(&block)
        self
      end

      # Add +record+ (a WorkerRecord); returns it.
      def add(record)
        @starts[record.index] += 1
        @by_pid[record.pid] = record
      end

      # How many workers were started in each slot after its first, for
      # whatever reason (a crash, a timeout, a phased restart, a refork):
      # { index => count }, the slots ever used. From any thread (dup: one
      # C call, so the master never adds a slot during the iteration).
      def restarts
        @starts.dup.to_h { |index, n| [index, n - 1] }
      end

      # Remove +record+; returns it, or nil when it was not there (any more).
      def delete(record)
        @by_pid.delete(record.pid)
      end

      # The record of the process +pid+, or nil.
      def [](pid)
        @by_pid[pid]
      end

      # How many processes: workers and the mold.
      def size
        @by_pid.size
      end

      # No process is left.
      def empty?
        @by_pid.empty?
      end

      # The workers that serve, or will (booting ones too): not the mold, not stopping.
      def serving
        select(&:serving?)
      end

      # The serving worker TTOU stops first: the most recently started one
      # (+strategy+ :youngest, Puma's default) or the longest running (:oldest).
      def cull(strategy)
        strategy == :oldest ? serving.first : serving.last
      end

      # The mold (pending or ready) unless it was told to stop; nil when there is none.
      def mold
        find { |w| w.mold? && !w.stopping? }
      end

      # The record whose heartbeat pipe is +io+, or nil.
      def by_beat(io)
        find { |w| w.channel.beat == io }
      end

      # The lowest worker index no worker holds, for one more worker when
      # +target+ should serve (a stopping worker still holds its index; so
      # does the mold, which serves again as that worker).
      def free_index(target)
        ((0..size + target).to_a - map(&:index)).first
      end

      # In a newly forked worker: close the master's side of every other worker's links.
      def close_channels
        each { |w| w.channel.close }
      end
    end
  end
end
