# frozen_string_literal: true

require "set"
require_relative "../clock"
require_relative "../log"
require_relative "../process/systemd"
require_relative "thread_pool"

module Margay
  class Server
    # Internal: the main thread's work while the server serves. Every tick
    # (about 5 ms) it gives the pool one look for its growth policy
    # (ThreadPool#consider_growth), has it replace a thread lost to an
    # exception (ThreadPool#replace_lost), calls on_tick (a cluster worker's
    # heartbeat and balancing), pings the systemd watchdog when one is due,
    # every DEADLINE_EVERY ticks checks request deadlines, and adds up the
    # pool's busy time (#busy_ms) and tells the engine its busy threads.
    class Supervisor
      # Seconds between ticks.
      INTERVAL = 0.005
      # Ticks between request-deadline checks (50 ms).
      DEADLINE_EVERY = 10

      # @param pool [ThreadPool]
      # @param engine [Native::Engine] tells whether the pool is saturated
      # @param deadline [Deadline, nil] request_timeout, when set
      # @param on_tick [#call, nil] called every tick
      # @param watchdog [Numeric, nil] seconds between WATCHDOG=1 pings (nil: none)
      # @param idle_timeout [Numeric, nil] return after this many seconds
      #   without a request (Puma's idle_timeout; nil: never)
      # @param log [Log, nil] says why it returned after idling
      # @param in_flight [FiberLoop::InFlight, nil] fiber mode: no growth while it has no room
      #   (the threads are not saturated, the cap is: another thread would take nothing)
      # @param clock [#now, #cpu, #run_delay] Margay::Clock (a test gives its own)
      # @param due [#call, nil] return once it answers true (a drain's end)
      def initialize(pool:, engine:, deadline: nil, on_tick: nil, watchdog: nil, idle_timeout: nil, log: nil,
                     in_flight: nil, clock: Clock, due: nil)
        @clock = clock
        @due = due
        @pool = pool
        @in_flight = in_flight
        @engine = engine
        @deadline = deadline
        @on_tick = on_tick
        @watchdog = watchdog
        @idle_timeout = idle_timeout
        @log = log
        @ticks = 0
        @cpu = @wall = @last_ping = nil # set by #run
        @delay = nil # the clock's run_delay at the last saturated look
        @requests = @active_at = nil
        @tick_errors = Set.new # where each error a tick raised came from (said once each)
        @busy_ms = 0.0
      end

      # Thread-milliseconds the pool's threads spent on requests so far: the
      # busy threads sampled each tick, times the tick's length (the stats'
      # busy_ms; over an interval, divided by max_threads: the utilization).
      def busy_ms
        @busy_ms.to_i
      end

      # Tick until +stop+ (an IO) becomes readable, idle_timeout passed
      # without a request, +due+ says so, or the main thread is interrupted (Ctrl-C outside a trap).
      def run(stop)
        @cpu = @clock.cpu
        @wall = @clock.now
        @last_ping = @wall
        @active_at = @wall
        until stop.wait_readable(INTERVAL)
          tick
          break if guarded { idle_too_long? } || @due&.call
        end
      rescue Interrupt
        nil
      end

      private

      # One tick. An error in one of its steps must not end the process (the main thread's
      # exception would, with every request in flight) nor keep the other steps from running
      # (the watchdog's ping, the request deadlines): each step is guarded on its own. Each
      # known way to fail is handled where it happens (an unreadable run queue, a refused
      # thread); an error not yet known is said once per class and place.
      def tick
        cpu = @clock.cpu
        wall = @clock.now
        busy = @pool.busy
        @busy_ms += busy * (wall - @wall) * 1000
        guarded { @engine.busy_threads = busy } # the agent's weight (agent_bind)
        guarded do
          saturated = @engine.saturated_ms.positive? && !(@in_flight && @in_flight.room.zero?)
          share = cpu_share(cpu, wall - @wall, saturated)
          @pool.consider_growth(saturated: saturated && !runnable_while_low?(share), cpu_share: share)
        end
        guarded { @pool.replace_lost unless @engine.stopping? } # its threads leave on their own once it stops
        guarded { @on_tick&.call }
        guarded { ping(wall) } if @watchdog
        @ticks += 1
        guarded { @deadline.check(@pool.threads) } if @deadline && (@ticks % DEADLINE_EVERY).zero?
        @cpu = cpu
        @wall = wall
      end

      def guarded(&)
        (@log || Log.new).guard("supervisor tick (serving on; said once)", @tick_errors, &)
      end

      # The share of the last +elapsed+ seconds this process computed or its
      # pool threads were ready to compute (CPU time plus the time they
      # waited for a CPU): busy threads that leave it low are blocked (I/O, a
      # lock, a sleep). Without the wait, a CPU-bound worker among more
      # processes than cores looked blocked (4 workers on 2 cores get half a
      # core each) and grew to max threads, which only added GVL hand-offs
      # and lowered throughput. The run queue (a file read per pool thread) is
      # read only when the look would otherwise count as blocked and the
      # pool could grow; a look without a reading on the tick before goes by
      # CPU time alone (growth needs consecutive blocked looks, and the next
      # one has a reading to compare with).
      def cpu_share(cpu, elapsed, saturated)
        return 1.0 unless elapsed.positive?

        share = (cpu - @cpu) / elapsed
        unless saturated && share < ThreadPool::BLOCKED_CPU_SHARE && @pool.room?
          @delay = nil
          return share
        end
        delay = @clock.run_delay(@pool.native_ids)
        unless delay # the system does not say (or the read failed): CPU time alone, and no
          @delay = nil # stale reading for the next look to compare with
          return share
        end

        last = @delay
        @delay = delay
        return share unless last

        share + [delay - last, 0].max / elapsed # a thread that ended takes its wait with it
      end

      # Whether a look that would count as blocked (+share+ low, the pool saturated with room)
      # found a pool thread runnable: waiting for a CPU since before the look (the wait is not
      # in run_delay until it ends) or just back on one. Not blocked, then: the look breaks a
      # run of blocked looks as a thread waiting for work does. A CPU-bound worker descheduled
      # for two looks in a row (two workers and a load generator on two cores) would otherwise
      # grow to max threads, which stay while requests keep coming and share the GVL: each
      # request's time in the app several of its own (docs/BENCHMARKS.md, "Where the Rails
      # tail comes from").
      def runnable_while_low?(share)
        return false unless @delay && share < ThreadPool::BLOCKED_CPU_SHARE # @delay: the look read the run queue

        @clock.runnable?(@pool.native_ids)
      end

      # Every DEADLINE_EVERY ticks: has no request arrived or run for idle_timeout seconds?
      def idle_too_long?
        return false unless @idle_timeout && (@ticks % DEADLINE_EVERY).zero?

        requests = @engine.stats[:requests]
        if requests != @requests || @pool.busy.positive?
          @requests = requests
          @active_at = @wall
          return false
        end
        return false if @wall - @active_at < @idle_timeout

        @log&.info("no request for #{@idle_timeout}s (idle_timeout): stopping")
        true
      end

      def ping(now)
        return if now - @last_ping < @watchdog

        Systemd.notify("WATCHDOG=1")
        @last_ping = now
      end
    end
  end
end
