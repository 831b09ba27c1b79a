# frozen_string_literal: true

require "test_helper"
require "minitest/mock"
require_relative "fiber_test_helper"

# A fiber-mode pool thread's loop (Server::FiberLoop), over real sockets: the max_in_flight
# cap (a graceful stop at the cap, no growth, one cap across threads), a thread whose wait
# set cannot be made, a request fiber without a stack.
class FiberLoopTest < Minitest::Test
  skip_on_jruby "no fiber mode: it needs the C engine's epoll"
  include Margay::TestHelper
  include FiberTestHelper

  # A thread parked for lack of room (max_in_flight reached, no fiber of its own) still sees
  # the stop: a graceful stop ends when the requests do, not after the whole shutdown_timeout.
  def test_graceful_stop_after_reaching_the_cap_ends_promptly
    app = lambda do |env|
      sleep(env["PATH_INFO"] == "/long" ? 1.0 : 0.1)
      text("ok")
    end
    stop_took = nil
    with_server(app, fiber_scheduler: true, event_backend: :auto, min_threads: 2, max_threads: 2,
                     max_in_flight: 1, shutdown_timeout: 30) do |_host, port, server, thread|
      long = send_get(port, "/long")
      sleep 0.2
      short = send_get(port, "/short")
      assert_equal [[200, "ok"], [200, "ok"]], [long, short].map { |s| read_response(s, timeout: 10).values_at(0, 2) }
      started = Margay::Clock.now
      server.stop
      thread.join(40)
      stop_took = Margay::Clock.now - started
    end
    # without the fix: the full 30 s grace, then ForceShutdown
    assert_operator stop_took, :<, 10, "a graceful stop with nothing in flight took #{stop_took.round(1)}s"
  end

  # Fiber mode keeps two threads with the default threads (0:5): the growth policy waits for a
  # process under half a core, which a saturated fiber thread never is, and a second thread is
  # what sends and reads without the GVL while the first runs Ruby.
  def test_the_default_pool_keeps_two_fiber_threads
    with_server(->(_env) { text("ok") }, fiber_scheduler: true, event_backend: :auto) do |_host, port, server|
      assert_match(%r{\AHTTP/1.1 200 }, raw_get(port))
      assert_equal 2, server.stats[:threads]
    end
  end

  # With max_in_flight reached the threads are not what is short: the pool does not grow.
  def test_the_pool_does_not_grow_while_the_cap_is_reached
    app = lambda do |_env|
      sleep 0.5
      text("ok")
    end
    threads = nil
    with_server(app, fiber_scheduler: true, event_backend: :auto, min_threads: 1, max_threads: 4,
                     max_in_flight: 2) do |_host, port, server|
      socks = Array.new(6) { send_get(port, "/") }
      assert_equal [200] * 6, socks.map { |s| read_response(s, timeout: 10).first }
      threads = server.stats[:threads]
    end
    assert_operator threads, :<=, 2, "the pool grew to #{threads} threads while max_in_flight was reached"
  end

  # The cap holds with several threads: each request's slot is claimed atomically when taken.
  def test_max_in_flight_holds_across_threads
    lock = Mutex.new
    now = 0
    most = 0
    app = lambda do |_env|
      lock.synchronize do
        now += 1
        most = now if now > most
      end
      sleep 0.2
      lock.synchronize { now -= 1 }
      text("ok")
    end
    with_server(app, fiber_scheduler: true, event_backend: :auto, min_threads: 4, max_threads: 4,
                     max_in_flight: 2) do |_host, port|
      socks = Array.new(12) { send_get(port, "/") }
      assert_equal [200] * 12, socks.map { |s| read_response(s, timeout: 10).first }
    end
    assert_operator most, :<=, 2, "max_in_flight 2 with 4 threads: the app saw #{most} at once"
    assert_equal 2, most, "requests overlapped up to the cap"
  end

  # A pool thread's own wait set cannot be made while descriptors run out (EMFILE): the thread
  # ends, and it used to end with only Ruby's report on stderr while the pool's growth started
  # another every three ticks for as long as the cause lasted (each dying at once). It is
  # logged, and another starts a second later (nor does the pool grow sooner), which serves.
  def test_a_thread_whose_wait_set_cannot_be_made_is_replaced_a_second_later
    original = Margay::Native::FiberWaits.method(:new)
    calls = 0
    failing = true
    flaky = lambda do |*args|
      calls += 1
      raise Errno::EMFILE, "epoll_create1" if failing

      original.call(*args)
    end
    Margay::Native::FiberWaits.stub(:new, flaky) do
      fiber_server(->(_env) { text("served") }) do |_host, port|
        sock = send_get(port, "/")
        sleep 0.5
        assert_operator calls, :<=, 2, "threads started in 0.5 s while the cause lasted"
        failing = false
        assert_equal [200, "served"], read_response(sock, timeout: 5).values_at(0, 2)
        assert_match(/pool thread margay-0 ended \(0 left.*Errno::EMFILE/, @server_log.string)
      ensure
        sock&.close
      end
    end
  end

  # No memory for a request's fiber stack: Ruby makes the stack at the fiber's first switch, so
  # that transfer raises FiberError and the fiber never runs (here the first request fiber of
  # the pool thread gets a transfer that raises so). That request gets a 503 and its
  # max_in_flight slot back. It used to leave the loop: the request unanswered, its slot and
  # the busy count never given back, the thread gone.
  def test_a_request_without_a_fiber_stack_is_answered_503_and_frees_its_slot
    original = Fiber.method(:new)
    refused = 0
    no_stack_once = lambda do |*args, **options, &block|
      fiber = original.call(*args, **options, &block)
      if refused.zero? && Thread.current.name&.start_with?("margay-")
        refused += 1
        def fiber.transfer(*)
          Kernel.raise FiberError, "can't alloc machine stack to fiber (1 x 659456 bytes): Cannot allocate memory" # self#raise is Fiber#raise
        end
      end
      fiber
    end
    fiber_server(->(_env) { text("served") }, max_in_flight: 1) do |_host, port, server|
      first = Fiber.stub(:new, no_stack_once) { raw_get(port) }
      assert_match(%r{\AHTTP/1.1 503 }, first)
      assert_match(/\r\n\r\nserved\z/, raw_get(port), "the slot is free again")
      assert_equal 1, refused
      assert_equal [1, 0], [server.stats[:threads], server.stats[:busy_threads]], "the same thread, not busy"
      assert_match(/no fiber for a request \(FiberError: can't alloc machine stack/, @server_log.string)
      refute_match(/ended \(/, @server_log.string, "no pool thread was lost")
    end
  end
end
