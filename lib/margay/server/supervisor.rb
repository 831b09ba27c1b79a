# frozen_string_literal: true

require_relative "../clock"
require_relative "../systemd"
require_relative "../runner"

module Margay
  class Server < Runner
    # Internal: the main thread's work while the server serves. Every tick
    # (about 5 ms) it gives the pool one look for its growth policy
    # (ThreadPool#consider_growth), calls on_tick (a cluster worker's
    # heartbeat and balancing), pings the systemd watchdog when one is due,
    # and every DEADLINE_EVERY ticks checks request deadlines.
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
      def initialize(pool:, engine:, deadline: nil, on_tick: nil, watchdog: nil, idle_timeout: nil, log: nil,
                     in_flight: nil)
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
        @requests = @active_at = nil
      end

      # Tick until +stop+ (an IO) becomes readable, idle_timeout passed
      # without a request, or the main thread is interrupted (Ctrl-C outside a trap).
      def run(stop)
        @cpu = Clock.cpu
        @wall = Clock.now
        @last_ping = @wall
        @active_at = @wall
        until stop.wait_readable(INTERVAL)
          tick
          break if idle_too_long?
        end
      rescue Interrupt
        nil
      end

      private

      def tick
        cpu = Clock.cpu
        wall = Clock.now
        elapsed = wall - @wall
        share = elapsed.positive? ? (cpu - @cpu) / elapsed : 1.0
        saturated = @engine.saturated_ms.positive? && !(@in_flight && @in_flight.room.zero?)
        @pool.consider_growth(saturated: saturated, cpu_share: share)
        @on_tick&.call
        ping(wall) if @watchdog
        @ticks += 1
        @deadline.check(@pool.threads) if @deadline && (@ticks % DEADLINE_EVERY).zero?
        @cpu = cpu
        @wall = wall
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
