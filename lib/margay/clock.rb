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
    if defined?(Process::CLOCK_PROCESS_CPUTIME_ID)
      def cpu
        Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
      end
    else # JRuby: no process CPU clock; Process.times adds the same up
      def cpu
        times = Process.times
        times.utime + times.stime
      end
    end

    TASKS = "/proc/self/task"
    SCHEDSTAT = File.readable?("/proc/self/schedstat") # Linux with schedstats

    # Seconds the threads with these kernel ids (Thread#native_thread_id)
    # have spent runnable but waiting for a CPU, together (Linux's schedstat
    # run_delay), or nil where the system does not say. A thread that gets
    # less CPU than it wants (more busy processes than cores) is not
    # blocked: this tells the two apart. A thread gone meanwhile counts 0.
    # nil too when a file cannot be read (no descriptor left: EMFILE, when
    # a flood or the app took them all), so the caller goes on without it.
    def run_delay(tids)
      return nil unless SCHEDSTAT

      tids.sum do |tid|
        File.read("#{TASKS}/#{tid}/schedstat").split(" ", 3)[1].to_i
      rescue Errno::ENOENT, Errno::ESRCH
        0
      end / 1e9
    rescue SystemCallError
      nil
    end

    # Whether any of the threads with these kernel ids is runnable now (state R: on a CPU or
    # waiting for one). The kernel adds a wait for a CPU to run_delay only when it ends, so a
    # thread descheduled across a whole look shows neither CPU time nor a wait: this is what
    # tells it from a blocked one. false where the system does not say or a file cannot be read.
    def runnable?(tids)
      tids.any? do |tid|
        stat = File.read("#{TASKS}/#{tid}/stat")
        stat[stat.rindex(")") + 2] == "R"
      rescue Errno::ENOENT, Errno::ESRCH
        false
      end
    rescue SystemCallError
      false
    end
  end
end
