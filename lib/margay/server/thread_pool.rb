# frozen_string_literal: true

require_relative "../errors"
require_relative "../clock"
require_relative "../runner"

module Margay
  class Server < Runner
    # Internal: the Ruby threads that run the application. There is no queue:
    # every idle thread waits inside the engine (leader/follower), and the
    # thread that receives a complete request runs the app itself, so no
    # request is handed from one thread to another.
    #
    # The pool grows toward max only when its threads are blocked rather than
    # busy (#consider_growth, asked by the server's supervisor), and threads
    # above min exit after idling.
    class ThreadPool
      # For how many consecutive looks every thread must have been busy while
      # the process used less than BLOCKED_CPU_SHARE of a core before one more
      # thread starts. Busy but not computing means blocked (I/O, a lock, a
      # sleep): only then does one more thread add throughput rather than GVL
      # hand-offs. Several looks filter out the process merely being
      # descheduled for a moment.
      GROW_AFTER_LOOKS = 3
      BLOCKED_CPU_SHARE = 0.5

      # The thread count it keeps even when idle, and its upper bound.
      attr_reader :min, :max

      # Seconds without growth after the system refused a thread.
      RETRY_AFTER = 60

      # @param min [Integer] threads kept even when idle (at least 1)
      # @param max [Integer] upper bound
      # @param idle_timeout [Numeric] seconds an extra thread may wait for work
      # @param log [Log, nil] says when a thread could not be started
      # @param retry_after [Numeric] seconds without growth after a refused thread
      # @yieldparam pool [ThreadPool] the block is what every thread runs; it
      #   asks #idle_budget how long to wait for work and #leave? when that
      #   passed, and returns when the thread should end
      def initialize(min:, max:, idle_timeout:, max_io: 0, log: nil, retry_after: RETRY_AFTER, &work)
        @log = log
        @retry_after = retry_after
        @refused_at = nil # when the system last refused a thread (Clock.now), until one starts
        @min = min
        @max = max
        @max_io = max_io # issue 13: Puma 8's max_io_threads (see #mark_io!)
        @io_marked = 0
        @idle_ms = (idle_timeout * 1000).to_i
        @work = work
        @threads = []
        @busy = 0
        @looks = 0
        @lock = Mutex.new
        @stopped = false
      end

      # Start the min threads. Returns self.
      def start
        @min.times { spawn }
        self
      end

      # How many threads there are.
      def size
        @lock.synchronize { @threads.size }
      end

      # How many threads are running the app (a statistic).
      def busy
        @busy
      end

      # Counted while a thread runs the app (a statistic: updated under the GVL).
      def busy!
        @busy += 1
      end

      # The calling thread's app call is over.
      def idle!
        @busy -= 1
      end

      # One look of the growth policy (the supervisor's, every few ms): grows
      # by one thread after GROW_AFTER_LOOKS consecutive looks at which the
      # pool was saturated (no thread waiting for work) while the process used
      # less than BLOCKED_CPU_SHARE of a core. Never per request: on a fast
      # app one thread that never waits for the GVL beats several that hand
      # it to each other. Returns true when it grew.
      # @param saturated [Boolean] no thread has been waiting for work
      # @param cpu_share [Float] process CPU time / wall time since the last look
      def consider_growth(saturated:, cpu_share:)
        @looks = saturated && cpu_share < BLOCKED_CPU_SHARE ? @looks + 1 : 0
        return false if @looks < GROW_AFTER_LOOKS

        @looks = 0
        grow
      end

      # One thread more, up to max (plus the threads marked I/O-bound, up to max_io). Returns
      # true when one started. The system may refuse a thread (a container's pids limit, the
      # address space): the pool then serves on with the threads it has, says so once, and
      # asks again only after +retry_after+ seconds. (On Ruby 3.3.8 the process hangs at its
      # next thread operation after a refused Thread.new, whatever happens here:
      # docs/CONFIGURATION.md, threads.)
      def grow
        @lock.synchronize do
          next false unless room_locked?

          begin
            spawn_locked
          rescue ThreadError => e
            @log&.warn("could not start another pool thread (#{e.message}): serving with #{@threads.size}, " \
                       "trying again in #{@retry_after}s") unless @refused_at
            @refused_at = Clock.now
            next false
          end
          @refused_at = nil
          true
        end
      end

      # Whether #grow would start a thread now.
      def room?
        @lock.synchronize { room_locked? }
      end

      # The kernel's ids of the threads (Thread#native_thread_id), for their
      # run-queue waits (Clock.run_delay).
      def native_ids
        threads.filter_map(&:native_thread_id)
      end

      # Issue 13, Puma 8's env["puma.mark_as_io_bound"]: the calling thread's request will
      # mostly wait, so up to max_io such threads do not count against max (the growth policy
      # may start one more thread for each). Cleared by #unmark_io! when the request ends.
      def mark_io!
        return true if @max_io.zero? || Thread.current.thread_variable_get(:margay_io_bound)

        Thread.current.thread_variable_set(:margay_io_bound, true)
        @lock.synchronize { @io_marked += 1 }
        true
      end

      # The calling thread's request ended: it counts against max again.
      def unmark_io!
        return if @max_io.zero? || !Thread.current.thread_variable_get(:margay_io_bound)

        Thread.current.thread_variable_set(:margay_io_bound, false)
        @lock.synchronize { @io_marked -= 1 }
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
      # Returns true when they all did.
      def join(timeout)
        deadline = Clock.now + timeout
        threads.each { |t| t.join([deadline - Clock.now, 0].max) }
        threads.none?(&:alive?)
      end

      # Interrupt threads still running the app (ForceShutdown), then wait
      # up to +wait+ seconds for each, killing those that do not end.
      def force_stop(wait = 2)
        @lock.synchronize { @stopped = true }
        threads.each { |t| t.raise(ForceShutdown, "forced shutdown") if t.alive? }
        # join after kill: the engine is freed next, and a killed thread may still be leaving native code
        threads.each { |t| t.join(wait) || t.kill.join(wait) }
      end

      # A snapshot of the threads.
      def threads
        @lock.synchronize { @threads.dup }
      end

      private

      def room_locked?
        @threads.size < @max + [@io_marked, @max_io].min && !@stopped &&
          !(@refused_at && Clock.now - @refused_at < @retry_after)
      end

      def spawn
        @lock.synchronize { spawn_locked }
      end

      # The new thread inherits a mask deferring ForceShutdown until it is
      # inside run_thread's rescue: one aimed at a thread that has just been
      # created ends it quietly too, rather than killing it (and being
      # re-raised by #force_stop's join).
      def spawn_locked
        thread = Thread.handle_interrupt(ForceShutdown => :never) { Thread.new { run_thread } }
        thread.name = "margay-#{@threads.size}"
        @threads << thread
      end

      def run_thread
        Thread.handle_interrupt(ForceShutdown => :immediate) { @work.call(self) }
      rescue ForceShutdown
        nil
      ensure
        @lock.synchronize { @threads.delete(Thread.current) }
      end
    end
  end
end
