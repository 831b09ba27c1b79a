# frozen_string_literal: true

module Margay
  class Cluster
    # Internal: holds a just-forked worker until the process that forked it
    # has run after_worker_fork, so the hooks run in Puma's order (the
    # parent's after_worker_fork, then the worker's before_worker_boot)
    # rather than in whichever order the two processes happen to reach them.
    # A pipe: the child waits for its end of file, which comes when the
    # parent #opens the gate, or exits.
    class ForkGate
      def initialize
        @r, @w = IO.pipe
      end

      # In the child, first: wait until the parent opened the gate.
      def wait
        @w.close
        @r.read(1)
        @r.close
      end

      # In the parent, after the fork: only the child waits on it.
      def forked
        @r.close
      end

      # In the parent, once its hook ran (or failed): the child goes on.
      def open
        [@r, @w].each { |io| io.close unless io.closed? }
      end
    end
  end
end
