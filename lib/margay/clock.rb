# frozen_string_literal: true

module Margay
  # Internal: the clocks every part reads, in seconds (Floats). Monotonic time
  # for deadlines and intervals (never wall time: it jumps), and the process's
  # CPU time for telling a blocked pool from a busy one.
  module Clock
    module_function

    # Monotonic seconds (for deadlines and intervals).
    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # CPU seconds this process has used, all threads together.
    def cpu
      Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    end
  end
end
