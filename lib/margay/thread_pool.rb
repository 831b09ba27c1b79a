# frozen_string_literal: true

module Margay
  # Internal: the Ruby threads that run the application. There is no queue:
  # every idle thread waits inside the engine (leader/follower), and the thread
  # that receives a complete request runs the app itself, so no request is
  # handed from one thread to another. The pool grows toward max when every
  # thread has been busy for a few milliseconds, and threads above min exit
  # after idling.
  class ThreadPool
    # Raised inside pool threads that are still busy when a forced stop ends
    # the grace period.
    class ForceShutdown < Exception; end # rubocop:disable Lint/InheritException

    attr_reader :min, :max

    # @param min [Integer] threads kept even when idle (at least 1)
    # @param max [Integer] upper bound
    # @param idle_timeout [Numeric] seconds an extra thread may wait for work
    # @yieldparam idle_ms [Integer, nil] how long this thread may idle before it
    #   should return (nil: forever); the block returns :idle or :stop
    def initialize(min:, max:, idle_timeout:, &work)
      @min = min
      @max = max
      @idle_ms = (idle_timeout * 1000).to_i
      @work = work
      @threads = []
      @busy = 0
      @lock = Mutex.new
      @stopped = false
    end

    def start
      @min.times { spawn }
      self
    end

    def size
      @lock.synchronize { @threads.size }
    end

    def busy
      @busy
    end

    # Counted while a thread runs the app (a statistic: updated under the GVL).
    def busy!
      @busy += 1
    end

    def idle!
      @busy -= 1
    end

    # One thread more, up to max. Called by the server's supervisor when every
    # thread has been busy for a while (a slow or blocking app), never per
    # request: on a fast app one thread that never waits for the GVL beats
    # several that hand it to each other.
    def grow
      @lock.synchronize { spawn_locked if @threads.size < @max && !@stopped }
    end

    # How long the calling thread may idle before leaving (nil: forever).
    def idle_budget
      @lock.synchronize { @threads.size > @min ? @idle_ms : nil }
    end

    # A thread asks to leave after idling; the pool keeps at least min.
    def leave?(thread)
      @lock.synchronize do
        next false if @threads.size <= @min

        @threads.delete(thread)
        true
      end
    end

    # Wait up to +timeout+ seconds for every thread to finish on its own.
    def join(timeout)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      threads.each do |t|
        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        t.join([left, 0].max)
      end
      threads.none?(&:alive?)
    end

    # Interrupt threads still running the app, then wait briefly.
    def force_stop(wait = 2)
      @lock.synchronize { @stopped = true }
      threads.each { |t| t.raise(ForceShutdown, "forced shutdown") if t.alive? }
      # join after kill: the engine is freed next, and a killed thread may still be leaving native code
      threads.each { |t| t.join(wait) || t.kill.join(wait) }
    end

    def threads
      @lock.synchronize { @threads.dup }
    end

    private

    def spawn
      @lock.synchronize { spawn_locked }
    end

    def spawn_locked
      thread = Thread.new { run_thread }
      thread.name = "margay-#{@threads.size}"
      @threads << thread
    end

    def run_thread
      @work.call(self)
    rescue ForceShutdown
      nil
    ensure
      @lock.synchronize { @threads.delete(Thread.current) }
    end
  end
end
