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

    TASKS = "/proc/self/task"

    # Seconds this process's threads have spent runnable but waiting for a
    # CPU, all threads together (Linux's schedstat run_delay), or nil where
    # the system does not say. A process that gets less CPU than it wants
    # (more busy processes than cores) is not blocked: this tells the two
    # apart.
    def run_delay
      ns = 0
      Dir.each_child(TASKS) do |tid|
        ns += File.read("#{TASKS}/#{tid}/schedstat").split(" ", 3)[1].to_i
      rescue Errno::ENOENT, Errno::ESRCH
        next # the thread ended meanwhile
      end
      ns / 1e9
    rescue SystemCallError, IOError
      nil
    end
  end
end
