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
      def initialize(pool:, engine:, deadline: nil, on_tick: nil, watchdog: nil)
        @pool = pool
        @engine = engine
        @deadline = deadline
        @on_tick = on_tick
        @watchdog = watchdog
        @ticks = 0
        @cpu = @wall = @last_ping = nil # set by #run
      end

      # Tick until +stop+ (an IO) becomes readable or the main thread is
      # interrupted (Ctrl-C outside a trap).
      def run(stop)
        @cpu = Clock.cpu
        @wall = Clock.now
        @last_ping = @wall
        tick until stop.wait_readable(INTERVAL)
      rescue Interrupt
        nil
      end

      private

      def tick
        cpu = Clock.cpu
        wall = Clock.now
        elapsed = wall - @wall
        share = elapsed.positive? ? (cpu - @cpu) / elapsed : 1.0
        @pool.consider_growth(saturated: @engine.saturated_ms.positive?, cpu_share: share)
        @on_tick&.call
        ping(wall) if @watchdog
        @ticks += 1
        @deadline.check(@pool.threads) if @deadline && (@ticks % DEADLINE_EVERY).zero?
        @cpu = cpu
        @wall = wall
      end

      def ping(now)
        return if now - @last_ping < @watchdog

        Systemd.notify("WATCHDOG=1")
        @last_ping = now
      end
    end
  end
end
