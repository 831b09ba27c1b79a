# frozen_string_literal: true

require_relative "../errors"
require_relative "fiber_timers"

module Margay
  class Server
    # Internal: the Fiber::Scheduler of one fiber-mode pool thread. It keeps what
    # the thread's fibers wait for: fds (in the thread's private epoll set, Native::FiberWaits),
    # timers (FiberTimers), blockers (Mutex, Queue, ConditionVariable, Thread#join) and the
    # fibers ready to run. FiberLoop runs it: resumes ready fibers, takes requests, waits.
    #
    # Every suspension goes through #suspend: the fiber transfers to the thread's root fiber
    # (where FiberLoop runs) with a Wait recording what it waits for; whichever event comes
    # first (fd, timer, unblock, timeout) completes the Wait once and puts the fiber in the
    # ready list. Fibers from other threads reach this one only through #unblock, which pushes
    # onto an inbox and pokes the thread's mailbox (an eventfd): the only cross-thread path.
    class FiberScheduler
      # What a suspended fiber waits for; completed at most once (#finish).
      class Wait
        attr_reader :fiber, :events
        attr_accessor :fd, :value, :done, :timer

        def initialize(fiber, events = 0)
          @fiber = fiber
          @events = events
          @fd = nil
          @done = false
          @value = nil
          @timer = nil
        end
      end

      # A pending raise into a fiber (Timeout.timeout, request_timeout): delivered at its
      # next resumption.
      Raise = Struct.new(:klass, :message, :timer)

      # Readable, priority, writable, error (core/waits.h: IO's own values for the first three).
      EVENT_ERR = 8
      # All the events a fiber can wait for.
      ALL_EVENTS = IO::READABLE | IO::PRIORITY | IO::WRITABLE

      # The fibers ready to run, in order, each followed by the value it resumes with (a flat
      # list: no pair allocated per wake-up; FiberLoop drains it).
      attr_reader :ready

      # @param waits [Native::FiberWaits] this thread's private wait set
      # @param log [Log, nil] where a Fiber.schedule'd fiber's error is logged
      def initialize(waits, log: nil)
        @waits = waits
        @log = log
        @scheduled = 0
        @thread = Thread.current
        @root = Fiber.current
        @ready = []
        @timers = FiberTimers.new
        @io = {} # fd => [Wait, ...]
        @blocked = {} # fiber => Wait (block, kernel_sleep: what #unblock ends)
        @waiting = {} # fiber => Wait, every suspended fiber's
        @inbox = [] # Waits (or fibers) unblocked from other threads (Array#push is atomic under the GVL)
        @raises = {} # fiber => Raise, delivered at its next resumption
        @out = []
        @unwinding = [] # fibers that waited while a ForceShutdown unwound them
      end

      # --- Fiber::Scheduler hooks ------------------------------------------------------

      # Wait until +io+ is ready for +events+ or +timeout+ seconds pass. Returns the events
      # that are ready, or false on timeout.
      def io_wait(io, events, timeout = nil)
        fd = io.fileno
        wait = Wait.new(Fiber.current, events & ALL_EVENTS)
        waiters = (@io[fd] ||= [])
        waiters << wait
        wait.fd = fd
        begin
          return events unless arm(fd)
        rescue StandardError # EBADF, ...: no stale Wait left on the fd (its number is reused)
          cancel(wait)
          raise
        end

        wait.timer = @timers.add(timeout, wait, false) if timeout
        suspend(wait)
      end

      # sleep: wake after +duration+ seconds (nil: until unblocked).
      def kernel_sleep(duration = nil)
        wait = Wait.new(Fiber.current)
        wait.timer = @timers.add(duration, wait, true) if duration
        @blocked[wait.fiber] = wait
        suspend(wait)
        nil
      end

      # Mutex, Queue, ConditionVariable, Thread#join: wait until #unblock (or +timeout+).
      # Returns true when unblocked, false on timeout.
      def block(_blocker, timeout = nil)
        wait = Wait.new(Fiber.current)
        wait.timer = @timers.add(timeout, wait, false) if timeout
        @blocked[wait.fiber] = wait
        suspend(wait)
      end

      # Make +fiber+ (blocked in #block or #kernel_sleep) ready. From any thread: from
      # another one it goes through the inbox and the mailbox.
      # From another thread the inbox carries the Wait the fiber is in now (read under the
      # GVL), so an unblock that arrives late (the wait timed out meanwhile) cannot end a
      # later wait of the same fiber; only the fiber when it has not registered its wait yet.
      def unblock(_blocker, fiber)
        if Thread.current.equal?(@thread)
          wake_blocked(fiber)
        else
          @inbox << (@blocked[fiber] || fiber)
          @waits.poke
        end
        nil
      end

      # Timeout.timeout: raise +klass+ in the calling fiber if the block runs past +duration+
      # (at its next wait: a fiber that computes is not interrupted).
      def timeout_after(duration, klass, message, &block)
        fiber = Fiber.current
        timer = raise_after(duration, fiber, klass, message)
        begin
          yield duration
        ensure
          cancel_timer(timer, fiber)
        end
      end

      # Process.wait and friends: in a helper thread (the fiber waits for its end).
      def process_wait(pid, flags)
        Thread.new { Process::Status.wait(pid, flags) }.value
      end

      # IO.select (Ruby 3.2 and later call this hook with IO.select's own arguments, one to
      # four; 3.1 has none, and IO.select blocks the thread there): in a helper thread, the
      # fiber waiting for its end. A fiber interrupted meanwhile (request_timeout, a stop) takes
      # its helper with it.
      def io_select(*arguments)
        helper = Thread.new do
          Thread.current.report_on_exception = false # its error is raised in the fiber
          IO.select(*arguments)
        end
        helper.value
      ensure
        helper&.kill
      end

      # DNS: getaddrinfo in a helper thread. Returns the addresses as Strings.
      def address_resolve(hostname)
        Thread.new { Addrinfo.getaddrinfo(hostname.delete_prefix("[").delete_suffix("]"), nil).map(&:ip_address).uniq }.value
      rescue SocketError
        []
      end

      # Fiber.schedule: a non-blocking fiber, run at once (the caller runs again next round).
      # Counted in #scheduled until it ends (the loop waits for it before stopping or idling
      # out). What it raises ends that fiber only, logged: entered by transfer, it would
      # otherwise surface in the root fiber and unwind the thread's loop with every other
      # fiber of the thread. ForceShutdown does unwind it (the thread is to stop now).
      def fiber(&block)
        fiber = Fiber.new(blocking: false) { |*args| run_scheduled(block, args) }
        @scheduled += 1
        @ready.push(Fiber.current, nil) unless Fiber.current.equal?(@root)
        run(fiber, nil)
        fiber
      end

      # The fibers made by #fiber that have not ended.
      attr_reader :scheduled

      # The fibers that took the thread's ForceShutdown (it landed while they ran) and waited
      # again while it unwound them: the stop is the thread's (FiberLoop#enter raises it in the
      # root), and they are not to be unwound a second time.
      attr_reader :unwinding

      # The thread ends: its loop ends only once every fiber it counts (requests and
      # #scheduled) ended, so none is left to run here, except when a ForceShutdown unwound
      # the loop (FiberLoop unwinds the request fibers then; Fiber.schedule'd ones are
      # abandoned: the thread is to stop now).
      def close
        nil
      end

      # --- for FiberLoop -----------------------------------------------------------------

      # Run +fiber+ with +value+ until it waits (or ends). From the root fiber, or from a
      # request fiber handing over to a new one (#fiber).
      def run(fiber, value)
        if Fiber.current.equal?(@root)
          fiber.transfer(value)
        else
          fiber.transfer(value) # the caller is in the ready list; it comes back through the root
        end
      end

      # A timer raising +klass+ with +message+ in +fiber+ (at its next wait) after +duration+
      # seconds, unless #cancel_timer is called first with what this returns.
      def raise_after(duration, fiber, klass, message)
        entry = @timers.add(duration, proc { interrupt(fiber, Raise.new(klass, message, entry)) })
        entry
      end

      # Cancel a #raise_after timer of +fiber+, and its raise if it fired but was not yet
      # delivered.
      def cancel_timer(entry, fiber)
        @timers.cancel(entry)
        @raises.delete(fiber) if @raises[fiber]&.timer.equal?(entry)
      end

      # Interrupt +fiber+ with +raise+ (a Raise) at its next wait, or at once when it waits now.
      def interrupt(fiber, pending)
        return unless fiber.alive?

        @raises[fiber] = pending
        wait = @waiting[fiber]
        finish(wait, nil) if wait
      end

      # Milliseconds until the next timer (nil: none), 0 when one is due.
      def next_timeout_ms(now)
        @timers.next_timeout_ms(now)
      end

      # Fire the due timers: call a Proc, finish a Wait.
      def fire_timers(now)
        @timers.fire(now) { |target, value| target.is_a?(Proc) ? target.call : finish(target, value) }
      end

      # One wait in the private set: +timeout_ms+ (nil: until something happens), +take+: how
      # many requests it may take. Completes the waits whose fds became ready; the requests
      # taken ([token, env] each) are in +requests+ (cleared first). Returns :stop or nil
      # (FiberWaits#wait).
      def wait_events(timeout_ms, take, requests)
        result = @waits.wait(timeout_ms, take, @out, requests)
        out = @out
        i = 0
        while i < out.size
          fd = out[i]
          fd.negative? ? drain_inbox : fd_ready(fd, out[i + 1])
          i += 2
        end
        result
      end

      # Whether fibers of this thread wait for anything (or are ready).
      def pending?
        !@ready.empty? || !@io.empty? || !@blocked.empty?
      end

      private

      def run_scheduled(block, args)
        block.call(*args)
      rescue APP_ERRORS => e # it would unwind the thread's loop
        @log&.exception(e, "Fiber.schedule'd fiber raised")
        nil
      ensure
        @scheduled -= 1
      end

      # Transfer to the root fiber until +wait+ completes; returns its value (or raises what
      # #interrupt asked for).
      def suspend(wait)
        @unwinding << wait.fiber if $!.is_a?(ForceShutdown) # rubocop:disable Style/SpecialGlobalVars -- the error being unwound
        @waiting[wait.fiber] = wait
        value = @root.transfer
        raise_pending(wait.fiber)
        value
      ensure
        cancel(wait) unless wait.done
      end

      def raise_pending(fiber)
        return if @raises.empty?

        r = @raises.delete(fiber)
        raise r.klass, r.message if r
      end

      # Complete +wait+ with +value+ once: the fiber becomes ready.
      def finish(wait, value)
        return if wait.done

        wait.done = true
        wait.value = value
        cancel(wait)
        @ready.push(wait.fiber, value)
      end

      # Forget +wait+'s registrations (its fd, its timer, its blocker entry).
      def cancel(wait)
        wait.done = true
        if wait.timer
          @timers.cancel(wait.timer)
          wait.timer = nil
        end
        @blocked.delete(wait.fiber) if @blocked[wait.fiber].equal?(wait)
        @waiting.delete(wait.fiber) if @waiting[wait.fiber].equal?(wait)
        return unless wait.fd

        waiters = @io[wait.fd]
        if waiters&.delete(wait) && waiters.empty?
          @io.delete(wait.fd)
          @waits.disarm(wait.fd)
        end
        wait.fd = nil
      end

      def wake_blocked(fiber)
        wait = @blocked[fiber]
        finish(wait, true) if wait
      end

      def drain_inbox
        while (item = @inbox.shift)
          item.is_a?(Wait) ? finish(item, true) : wake_blocked(item)
        end
      end

      # Arm +fd+ for the union of its waiters' events; false when it cannot be polled (then
      # every waiter on it is ready at once).
      def arm(fd)
        waiters = @io[fd]
        events = waiters.inject(0) { |m, w| m | w.events } # a union: two readers are still IO::READABLE
        return true if @waits.arm(fd, events)

        waiters.dup.each { |w| w.fiber.equal?(Fiber.current) ? cancel(w) : finish(w, w.events) }
        false
      end

      def fd_ready(fd, revents)
        waiters = @io[fd]
        return unless waiters

        waiters.dup.each do |w|
          got = revents & EVENT_ERR == 0 ? revents & w.events : w.events
          finish(w, got) unless got.zero?
        end
        arm(fd) if @io.key?(fd) # the ones still waiting (one-shot: it fired)
      end
    end
  end
end
