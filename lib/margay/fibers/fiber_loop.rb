# frozen_string_literal: true

require_relative "../clock"
require_relative "../errors"
require_relative "../log"
require_relative "../native"
require_relative "fiber_scheduler"

module Margay
  class Server
    # Internal: what a pool thread runs in fiber mode (config.fiber_scheduler): each
    # request in a non-blocking Fiber under this thread's FiberScheduler. One turn of #serve:
    # run the fibers that are ready (each until its next wait), fire due timers, then wait once
    # in C (Native::FiberWaits#wait, without the GVL) for a fiber's fd, a poke from another
    # thread, a timer's time, or a new request, which it takes only while it has fewer than
    # RUNNABLE_CAP fibers ready and the process has fewer than max_in_flight requests in flight
    # (InFlight). A thread busy running fibers is not waiting, so the other threads take the
    # new requests meanwhile, as in thread mode.
    class FiberLoop
      # A thread takes no new request while this many of its fibers are ready to run: the ones
      # that compute are not joined by more work than the thread can turn over.
      RUNNABLE_CAP = 64
      # At most this many requests taken per wait (core/waits.h MG_WAITS_TAKE).
      TAKE_MAX = 16
      # env["puma.mark_as_io_bound"] in fiber mode: every request's waits already yield its
      # thread, so there is nothing to mark (true: marked).
      IO_BOUND = -> { true }

      # The process-wide count of requests in flight in fiber mode, against max_in_flight. A
      # slot is claimed in C (Native::InFlight, atomically) by the wait that takes a request,
      # so several threads never pass the cap together; #leave releases it when the request's
      # fiber ends and, when the cap was full, pokes every thread's set: one parked for lack
      # of room (taking nothing, not listening to the engine) looks again.
      class InFlight
        # @param max [Integer] config.max_in_flight
        def initialize(max)
          @native = Native::InFlight.new(max)
          @waits = [] # every fiber-mode thread's Native::FiberWaits
        end

        # The Native::InFlight that FiberWaits#wait claims slots of.
        attr_reader :native

        def max
          @native.max
        end

        def count
          @native.count
        end

        # How many more requests may start (a hint: the wait claims each one).
        def room
          n = @native.max - @native.count
          n.positive? ? n : 0
        end

        # A thread's set, poked when room comes back.
        def register(waits)
          @waits << waits
        end

        def unregister(waits)
          @waits.delete(waits)
        end

        def leave
          @waits.dup.each(&:poke) if @native.leave
        end
      end

      # @param engine [Native::Engine]
      # @param handler [RequestHandler] runs each request (#call)
      # @param pool [ThreadPool] the busy statistic and the idle-exit policy
      # @param in_flight [InFlight] shared by the process's fiber-mode threads
      # @param log [Log]
      # @param out_of_band [#call, nil] called when the thread's last fiber ends
      # @param interruptible [Boolean] request_timeout is on: the supervisor may raise
      #   RequestTimeout into a running request fiber (FiberDeadline#check), so each transfer
      #   into one opens the interrupt mask (#enter); off, a transfer is only a transfer
      def initialize(engine:, handler:, pool:, in_flight:, log:, out_of_band: nil, interruptible: true)
        @engine = engine
        @interruptible = interruptible
        @handler = handler
        @pool = pool
        @in_flight = in_flight
        @log = log
        @out_of_band = out_of_band
        @oob_due = false
        @scheduler = nil
        @refusing = false # the last request found no fiber (said once)
        @live = {} # the request fibers of this thread (keys): how many run, and what a forced stop unwinds
      end

      # Serve until the engine stops (and this thread's fibers are done) or the pool lets the
      # thread go after idling.
      def serve
        waits = Native::FiberWaits.new(@engine, @in_flight.native)
        @in_flight.register(waits)
        @scheduler = FiberScheduler.new(waits, log: @log)
        Fiber.set_scheduler(@scheduler)
        # RequestTimeout (FiberDeadline#check's Thread#raise) only while a request fiber runs
        Thread.handle_interrupt(RequestTimeout => :never) { serve_loop }
      rescue ForceShutdown
        unwind_requests
        raise
      ensure
        Fiber.set_scheduler(nil) if @scheduler
        if waits
          @in_flight.unregister(waits)
          waits.close
        end
      end

      private

      # A forced stop (ForceShutdown) unwinds the request fibers still waiting on this thread
      # too, so their ensure blocks run (body#close, rack.input's tempfile; RequestHandler#call
      # drops the connection). One whose unwinding waits again is left as it is.
      def unwind_requests
        Thread.handle_interrupt(ForceShutdown => :never, RequestTimeout => :never) do
          (@live.keys - @scheduler.unwinding).each do |fiber|
            fiber.raise(ForceShutdown, "forced shutdown") if fiber.alive?
          rescue ForceShutdown, FiberError
            nil
          end
        end
      end

      def serve_loop
        stopping = false
        idle_since = nil
        requests = []
        ready = @scheduler.ready
        loop do
          run_ready(ready) unless ready.empty?
          now = Clock.now
          timeout = @scheduler.next_timeout_ms(now)
          if timeout&.zero?
            @scheduler.fire_timers(now)
            run_ready(ready) unless ready.empty?
            timeout = @scheduler.next_timeout_ms(now)
          end
          out_of_band if @oob_due
          break if stopping && idle?

          # nil once stopping: take nothing, and :stop is known (otherwise reported whatever
          # take is: a thread parked at the cap sees the stop too)
          take = (stopping ? nil : [RUNNABLE_CAP - (ready.size / 2), @in_flight.room, TAKE_MAX].min)
          timeout = 0 unless ready.empty?
          budget = (@pool.idle_budget if take&.positive? && idle?)
          timeout = [timeout || budget, budget].min if budget
          result = @scheduler.wait_events(timeout, take, requests)
          if !requests.empty?
            idle_since = nil
            requests.each { |request| start(request) }
          elsif result == :stop
            stopping = true
          elsif budget && idle?
            idle_since ||= now
            break if Clock.now - idle_since >= budget / 1000.0 && @pool.leave?(Thread.current)
          end
        end
      end

      # No fiber of this thread left: neither a request's nor a Fiber.schedule'd one.
      def idle?
        @live.empty? && @scheduler.scheduled.zero?
      end

      # Resume the fibers that were ready when the turn began (those they make ready run in
      # the next turn, after the wait: no fiber keeps others from their events).
      def run_ready(ready)
        n = ready.size
        while n.positive?
          fiber = ready.shift
          value = ready.shift
          n -= 2
          enter(fiber, value) if fiber.alive?
        end
      end

      # Run +fiber+ until it waits or ends, open to the supervisor's RequestTimeout (the
      # interrupt mask is the thread's: open only around the transfer, never in this root
      # fiber). One that lands here was aimed at a fiber that yielded meanwhile: dropped (the
      # scheduler's timer covers a waiting fiber). Without request_timeout nothing raises
      # RequestTimeout: the mask stays as it is (a handle_interrupt block per transfer costs
      # more than the transfer). A forced stop that landed in the fiber and found it waiting
      # again as it unwound is the thread's: raised here, in the root.
      def enter(fiber, value = nil)
        if @interruptible
          entered = false
          Thread.handle_interrupt(RequestTimeout => :immediate) do
            entered = true
            fiber.transfer(value)
          end
        else
          fiber.transfer(value)
        end
        raise ForceShutdown, "forced shutdown" unless @scheduler.unwinding.empty?
      rescue RequestTimeout
        retry if @interruptible && !entered # it was pending as the window opened: the fiber still runs
      end

      # A request's own fiber. Ruby makes a fiber's stack at its first switch, not in Fiber.new:
      # when there is no memory for it, that first transfer raises FiberError and the fiber
      # never ran (+started+ still false).
      def start(request)
        @pool.busy! # and its slot of @in_flight was claimed by the wait that took it (#finished gives both back)
        started = false
        fiber = Fiber.new(blocking: false) do |(token, env, hijack)|
          started = true
          serve_requests(token, env, hijack)
        end
        @live[fiber] = true
        enter(fiber, request)
      rescue FiberError => e
        raise if started

        refuse(request, e, fiber)
      end

      # No fiber for a request: a 503 (the app never saw it), and its in-flight slot and its
      # count given back; said once until a fiber starts again.
      def refuse(request, error, fiber)
        token, env = request
        input = env[Rack::RACK_INPUT]
        input.close if input.is_a?(File) && !input.closed?
        @log.warn("fiber mode: no fiber for a request (#{error.class}: #{Log.message(error)}): 503") unless @refusing
        @refusing = true
        @engine.error_response(token, 503)
      ensure
        finished(fiber)
      end

      # One connection's requests in this fiber: the first, then those it pipelined while
      # this fiber's turn on it lasts (Engine#next_request with a continue token and no wait).
      def serve_requests(token, env, hijack)
        @refusing = false
        loop do
          env[IO_BOUND_KEY] = IO_BOUND
          continue_with = @handler.call(token, env, hijack) # request_timeout: FiberDeadline, the handler's deadline
          break unless continue_with

          request = @engine.next_request(continue_with, 0)
          break unless request.is_a?(Array)

          token, env, hijack = request
        end
      rescue APP_ERRORS => e # RequestHandler#call answered or aborted the request; what is left must
        # not unwind the thread's loop and every other fiber on it
        @log.exception(e, "fiber-mode request")
      ensure
        finished(Fiber.current)
      end

      def finished(fiber)
        @live.delete(fiber)
        @in_flight.leave
        @pool.idle!
        @oob_due = true if @live.empty? && @out_of_band
      end

      # Puma's out_of_band hooks, from the loop (not inside a request's fiber) once the
      # thread's last fiber ended.
      def out_of_band
        @oob_due = false
        @out_of_band.call if @live.empty?
      end

      IO_BOUND_KEY = "puma.mark_as_io_bound"
      private_constant :IO_BOUND_KEY
    end
  end
end
