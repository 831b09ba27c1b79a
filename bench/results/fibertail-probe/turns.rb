# frozen_string_literal: true

require "margay/fibers/fiber_loop"

# Each fiber thread's turns (FiberLoop): per turn, when its wait was called and returned, the
# requests it took, and the fibers run before it; written to $PROBE_DIR/<pid>-turns.log at exit
# (pid tid wait_start wait_end taken ran timeout_ms), appended every 100 turns of a thread (a
# worker ends with exit!: no at_exit).
module FiberTailTurns
  TURNS = {}

  module Loop
    def run_ready(ready)
      (Thread.current[:ft_ran] ||= [0])[0] += ready.size / 2
      super
    end
  end

  module Sched
    def wait_events(timeout_ms, take, requests)
      a = Process.clock_gettime(Process::CLOCK_REALTIME)
      r = super
      b = Process.clock_gettime(Process::CLOCK_REALTIME)
      ran = (Thread.current[:ft_ran] ||= [0])
      list = (TURNS[Thread.current] ||= [])
      list << [a, b, requests.size, ran[0], timeout_ms || -1]
      ran[0] = 0
      FiberTailTurns.flush(Thread.current, list) if list.size >= 100
      r
    end
  end

  def self.flush(thread, list)
    File.open(File.join(ENV.fetch("PROBE_DIR"), "#{Process.pid}-turns.txt"), "a") do |f|
      f.write(list.map { |x| format("%d %d %.6f %.6f %d %d %d\n", Process.pid, thread.native_thread_id, *x) }.join)
    end
    list.clear
  end
end
Margay::Server::FiberLoop.prepend(FiberTailTurns::Loop)
Margay::Server::FiberScheduler.prepend(FiberTailTurns::Sched)
