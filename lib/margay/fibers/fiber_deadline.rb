# frozen_string_literal: true

require_relative "../server/deadline"

module Margay
  class Server
    # Internal: request_timeout in fiber mode. Like Deadline it covers the app call
    # only (RequestHandler#call: not body.close, not rack.response_finished callbacks), in two
    # ways at once:
    #   - a fiber that waits past the limit gets RequestTimeout from its scheduler's timer
    #     (FiberScheduler#raise_after) at that wait;
    #   - a fiber that computes without waiting is interrupted by the supervisor (#check,
    #     Thread#raise), as thread mode's threads are. Its entry is a fiber-local (Thread#[]),
    #     and Thread#[] from another thread reads the fiber running in that thread at the
    #     time, so only a running, overdue request fiber is aimed at. FiberLoop lets
    #     RequestTimeout through only while it runs a request fiber (handle_interrupt), and
    #     drops one that reaches its root fiber (aimed at a fiber that had just yielded).
    # The grace and on_stuck are Deadline's.
    class FiberDeadline < Deadline
      def track(env)
        fiber = Fiber.current
        scheduler = Fiber.scheduler
        entry = [Clock.now, env, false]
        Thread.current[KEY] = entry
        timer = scheduler&.raise_after(@timeout, fiber, RequestTimeout, "request ran past request_timeout (#{@timeout}s)")
        begin
          yield
        ensure
          @lock.synchronize { Thread.current[KEY] = nil }
          scheduler&.cancel_timer(timer, fiber)
          elapsed = Clock.now - entry[0]
          if elapsed >= @timeout && !entry[2] # the timer's case (#check logs its own)
            @log.error("request_timeout: #{Log.request(env)} ran #{elapsed.round(1)}s (limit #{@timeout}s)")
          end
        end
      end

      # From the supervisor: interrupt the running request fibers past the deadline; report
      # those still running +grace+ seconds later.
      def check(threads)
        t = Clock.now
        threads.each do |thread|
          entry = thread[KEY] # the running fiber's: [started, env, state]
          next unless entry && t - entry[0] >= @timeout

          if !entry[2]
            interrupt_fiber(thread, entry, t - entry[0])
          elsif entry[2] == true && t - entry[0] > @timeout + @grace
            @log.error("request_timeout: #{Log.request(entry[1])} ignores its interrupt for #{@grace}s: capacity lost")
            entry[2] = :reported
            @on_stuck&.call
          end
        end
      end

      private

      def interrupt_fiber(thread, entry, elapsed)
        aimed = @lock.synchronize do
          next false unless thread[KEY].equal?(entry)

          entry[2] = true
          thread.raise(RequestTimeout, "request ran past request_timeout (#{@timeout}s)")
          true
        end
        return unless aimed

        trace = (thread.backtrace || []).first(20).map { |l| "    #{l}" }.join("\n")
        @log.error("request_timeout: #{Log.request(entry[1])} ran #{elapsed.round(1)}s (limit #{@timeout}s)\n#{trace}")
      end
    end
  end
end
