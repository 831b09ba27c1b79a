# frozen_string_literal: true

require_relative "../errors"
require_relative "../clock"

module Margay
  class Server
    # Internal: the Ruby threads that run the application. There is no queue:
    # every idle thread waits inside the engine (leader/follower), and the
    # thread that receives a complete request runs the app itself, so no
    # request is handed from one thread to another.
    #
    # The pool grows toward max only when its threads are blocked rather than
    # busy: on demand, a thread per request waiting while none does, until the
    # supervisor's looks find the process computing (#grow_on_demand); by those
    # looks (#consider_growth). Threads above min exit after idling, and those
    # started on demand leave once the looks find the process computing.
    class ThreadPool
      # The count of threads running the app. The GVL makes += exact on MRI; JRuby runs the
      # threads in parallel, and an atomic counts there.
      class PlainCount
        def initialize = @value = 0

        def get = @value

        def incrementAndGet = @value += 1 # rubocop:disable Naming/MethodName -- AtomicLong's

        def decrementAndGet = @value -= 1 # rubocop:disable Naming/MethodName -- AtomicLong's
      end
      BusyCount = RUBY_ENGINE == "jruby" ? java.util.concurrent.atomic.AtomicLong : PlainCount

      # For how many consecutive looks every thread must have been busy while
      # the process used less than BLOCKED_CPU_SHARE of a core before the pool
      # grows. Busy but not computing means blocked (I/O, a lock, a sleep):
      # only then do more threads add throughput rather than GVL hand-offs.
      # Two: the first look takes a reading of the threads' run-queue waits
      # and the second counts them as work (Supervisor#cpu_share), so a
      # process merely descheduled for a moment does not grow.
      GROW_AFTER_LOOKS = 2
      BLOCKED_CPU_SHARE = 0.5

      # The thread count it keeps even when idle, and its upper bound.
      attr_reader :min, :max

      # Seconds without growth after the system refused a thread.
      RETRY_AFTER = 60
      # Seconds before a thread that ended by an exception is replaced (and without growth):
      # a cause that lasts (no descriptor left for a fiber-mode thread's wait set) costs one
      # thread start and one log line a second, not one a tick.
      REPLACE_AFTER = 1

      # @param min [Integer] threads kept even when idle (at least 1)
      # @param max [Integer] upper bound
      # @param idle_timeout [Numeric] seconds an extra thread may wait for work
      # @param log [Log, nil] says when a thread could not be started
      # @param retry_after [Numeric] seconds without growth after a refused thread
      # @param replace_after [Numeric] seconds before a thread lost to an exception is replaced
      # @yieldparam pool [ThreadPool] the block is what every thread runs; it
      #   asks #idle_budget how long to wait for work and #leave? when that
      #   passed, and returns when the thread should end
      def initialize(min:, max:, idle_timeout:, max_io: 0, log: nil, retry_after: RETRY_AFTER,
                     replace_after: REPLACE_AFTER, &work)
        @log = log
        @retry_after = retry_after
        @replace_after = replace_after
        @refused = false # the system refused the last thread asked for (said once, until one starts)
        @paused_until = nil # no thread starts before this Clock.now (a refused or a lost thread)
        @min = min
        @max = max
        @max_io = max_io # Puma 8's max_io_threads (see #mark_io!)
        @io_marked = 0
        @idle_ms = (idle_timeout * 1000).to_i
        @work = work
        @threads = []
        @busy = BusyCount.new
        @looks = 0
        @computing_looks = 0
        @computing = false # the supervisor's looks found the process computing (#consider_growth)
        @on_demand = 0 # threads started by #grow_on_demand and still here
        @retiring = 0 # of those, how many are to leave at their next turn (#retire?)
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
      def busy = @busy.get

      # Counted while a thread runs the app.
      def busy! = @busy.incrementAndGet

      # The calling thread's app call is over.
      def idle! = @busy.decrementAndGet

      # One look of the growth policy (the supervisor's, every few ms): after
      # GROW_AFTER_LOOKS consecutive looks at which the pool was saturated (no
      # thread waiting for work) while the process used less than
      # BLOCKED_CPU_SHARE of a core, the pool grows to its bound at once, as
      # Puma starts a thread per queued request: every thread it has is
      # blocked, and requests wait for a thread meanwhile (each look spent a
      # thread short is 5 ms more on every waiting request). Never for a
      # process the looks find computing: on a fast app one thread that never
      # waits for the GVL beats several that hand it to each other. Returns
      # true when it grew.
      #
      # GROW_AFTER_LOOKS looks in a row at which the process computed (cpu_share at least
      # BLOCKED_CPU_SHARE) end on-demand growth, and the threads it started leave at their next
      # turn; it starts again only once these looks grew the pool (a share measured over 5 ms
      # on a shared machine scatters: one low look does not make a computing process blocked).
      def consider_growth(saturated:, cpu_share:)
        computing = cpu_share >= BLOCKED_CPU_SHARE
        @computing_looks = computing ? @computing_looks + 1 : 0
        if @computing_looks >= GROW_AFTER_LOOKS
          @computing = true
          retire_on_demand
        end
        @looks = saturated && !computing ? @looks + 1 : 0
        return false if @looks < GROW_AFTER_LOOKS

        @looks = 0
        @computing = false
        grow(@max)
      end

      # Asked by a thread that took a request while no other waits for work and more requests
      # wait (Engine#starved?): one thread more at once, as Puma starts a thread per request
      # queued, unless the supervisor's looks found the process computing (a fast app serves
      # best on the threads it has: more would only hand the GVL to each other). The cheap
      # test first: the caller asks the engine only when this is true.
      def grow_on_demand?
        !@computing && @threads.size < @max
      end

      # One thread more (see #grow_on_demand?). Returns true when one started.
      def grow_on_demand
        @lock.synchronize do
          next false if @computing || !room_locked? || !start_locked

          @on_demand += 1
          true
        end
      end

      # Whether the calling thread, back from a request, is one of the threads started on
      # demand that are to leave (the process turned out to compute); it is then gone from
      # the pool.
      def retire?(thread)
        return false if @retiring.zero?

        @lock.synchronize do
          next false if @retiring.zero? || @threads.size <= @min

          @retiring -= 1
          @on_demand -= 1
          @threads.delete(thread)
          true
        end
      end

      # Up to +count+ threads more, up to max (plus the threads marked I/O-bound, up to
      # max_io). Returns true when one started. The system may refuse a thread (a container's
      # pids limit, the address space): the pool then serves on with the threads it has, says so
      # once, and asks again only after +retry_after+ seconds. (On Ruby 3.3.8 the process hangs
      # at its next thread operation after a refused Thread.new, whatever happens here:
      # docs/CONFIGURATION.md, threads.)
      def grow(count = 1)
        @lock.synchronize { count.times.count { room_locked? && start_locked }.positive? }
      end

      # From the supervisor's tick: when a thread ended by an exception left fewer than min,
      # start one (REPLACE_AFTER after the loss). Returns true when one started.
      def replace_lost
        @lock.synchronize { @threads.size < @min && !paused_locked? && start_locked }
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

      # Puma 8's env["puma.mark_as_io_bound"]: the calling thread's request will
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

      # How long the calling thread may idle before leaving (nil: forever). Asked before each
      # wait for work, so without the lock: #leave? decides under it.
      def idle_budget
        @threads.size > @min ? @idle_ms : nil
      end

      # A thread asks to leave after idling; the pool keeps at least min.
      def leave?(thread)
        @lock.synchronize do
          next false if @threads.size <= @min

          @threads.delete(thread)
          @on_demand -= 1 if @on_demand.positive? # which thread it was does not matter
          @retiring = @on_demand if @retiring > @on_demand
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

      def retire_on_demand
        @lock.synchronize { @retiring = @on_demand }
      end

      def room_locked?
        @threads.size < @max + [@io_marked, @max_io].min && !paused_locked?
      end

      def paused_locked?
        @stopped || (@paused_until && Clock.now < @paused_until)
      end

      # Start a thread unless the system refuses one (then say so once and pause).
      def start_locked
        spawn_locked
        @refused = false
        true
      rescue ThreadError => e
        @log&.warn("could not start another pool thread (#{e.message}): serving with #{@threads.size}, " \
                   "trying again in #{@retry_after}s") unless @refused
        @refused = true
        pause_locked(@retry_after)
        false
      end

      def pause_locked(seconds)
        @paused_until = [@paused_until || 0, Clock.now + seconds].max
      end

      def spawn
        @lock.synchronize { spawn_locked }
      end

      # The new thread inherits a mask deferring ForceShutdown until it is
      # inside run_thread's rescue: one aimed at a thread that has just been
      # created ends it quietly too, rather than killing it (and being
      # re-raised by #force_stop's join). RequestTimeout stays deferred for the
      # thread's life except where a request runs (Deadline#track, FiberLoop#enter
      # open it): one still pending as a forced stop unwinds the thread's loop
      # would otherwise replace the ForceShutdown.
      def spawn_locked
        name = "margay-#{@threads.size}"
        thread = Thread.handle_interrupt(ForceShutdown => :never, RequestTimeout => :never) do
          # named by itself before anything runs: on JRuby it runs at once, in parallel
          Thread.new do
            Thread.current.name = name
            run_thread
          end
        end
        thread.name = name
        @threads << thread
      end

      def run_thread
        Thread.handle_interrupt(ForceShutdown => :immediate) { @work.call(self) }
      rescue ForceShutdown
        nil
      rescue SystemExit, SignalException
        raise # `exit` in a thread hook: Ruby ends the process, as it always did (a request's is a 500)
      rescue APP_ERRORS => e # a request's own errors were answered; this is the loop's (no descriptor
        # for a fiber-mode thread's wait set): say it, and #replace_lost starts another
        lost(e)
      ensure
        @lock.synchronize { @threads.delete(Thread.current) }
      end

      def lost(error)
        left = @lock.synchronize do
          pause_locked(@replace_after)
          @threads.size - 1
        end
        @log&.exception(error, "pool thread #{Thread.current.name} ended (#{left} left; " \
                               "another starts in #{@replace_after}s if under min)")
      end
    end
  end
end
