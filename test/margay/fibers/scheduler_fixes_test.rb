# frozen_string_literal: true

require "test_helper"
require "margay/clock"
require "margay/server"
require "minitest/mock"

# Fiber mode (issue 13): the review's findings on the scheduler and the loop, each over real
# sockets. Behaviour is asserted (who woke, what was answered, which thread), never wall time
# except as a generous bound against the full shutdown grace.
class FiberSchedulerFixesTest < Minitest::Test
  include Margay::TestHelper

  def fiber_server(app, **settings, &block)
    with_server(app, fiber_scheduler: true, event_backend: :auto, min_threads: 1, max_threads: 1, **settings, &block)
  end

  def text(body)
    [200, { "content-type" => "text/plain" }, [body.to_s]]
  end

  def send_get(port, path)
    sock = TCPSocket.new("127.0.0.1", port)
    sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\n\r\n")
    sock
  end

  # Two requests wait on one fd (+wait+ true once it is ready), then a third runs +release+:
  # both waiting requests must wake and answer +ready+.
  def assert_two_waiters_wake(ready, wait:, release:)
    waiting = Queue.new
    app = lambda do |env|
      if env["PATH_INFO"] == "/wait"
        waiting << 1
        text(wait.call ? ready : "timed out")
      else
        release.call
        text("released")
      end
    end
    fiber_server(app) do |_host, port|
      a = send_get(port, "/wait")
      pop_within(waiting, 5)
      b = send_get(port, "/wait")
      pop_within(waiting, 5)
      assert_equal "released", read_response(send_get(port, "/release"))[2]
      assert_equal [[200, ready], [200, ready]], [a, b].map { |s| read_response(s, timeout: 10).values_at(0, 2) }
    end
  end

  def fill(pipe)
    loop { pipe.write_nonblock("x" * 65_536) }
  rescue IO::WaitWritable
    nil
  end

  # Two fibers waiting on one fd: the fd is armed for the union of their events (a sum of two
  # IO::READABLE was IO::PRIORITY, two IO::WRITABLE an unknown bit: neither ever woke).
  def test_two_readers_of_one_pipe_both_wake
    r, w = IO.pipe
    assert_two_waiters_wake("readable", wait: -> { r.wait_readable(5) }, release: -> { w.write("x") })
  ensure
    r&.close
    w&.close
  end

  # IO.select goes through the scheduler's io_select hook (a helper thread per call), so the
  # thread serves the other requests meanwhile: with all four arguments, and with the readables
  # alone (the hook gets IO.select's arguments as they were given). Ruby 3.1 has no such hook:
  # there IO.select blocks the thread (docs/CONFIGURATION.md, "Fiber mode").
  def test_io_select_waits_in_its_fiber
    skip "Ruby #{RUBY_VERSION} calls no scheduler hook for IO.select" if RUBY_VERSION < "3.2"
    [->(r) { IO.select([r], nil, nil, 5) }, ->(r) { IO.select([r]) }].each do |select|
      r, w = IO.pipe
      assert_two_waiters_wake("selected", wait: -> { select.call(r)&.first == [r] }, release: -> { w.write("x") })
    ensure
      r&.close
      w&.close
    end
  end

  def test_two_writers_of_one_pipe_both_wake
    r, w = IO.pipe
    fill(w)
    assert_two_waiters_wake("writable", wait: -> { w.wait_writable(5) }, release: -> { r.read_nonblock(1 << 20) })
  ensure
    r&.close
    w&.close
  end

  # What a Fiber.schedule'd fiber raises ends that fiber only: it is logged, the thread's
  # other requests are answered, and the thread goes on serving.
  def test_a_raising_scheduled_fiber_is_logged_and_its_thread_goes_on
    threads = Queue.new
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/bg"
        Fiber.schedule do
          sleep 0.05
          raise "bg boom"
        end
        text("spawned")
      when "/sleep"
        threads << Thread.current
        sleep 0.3
        text("slept")
      else
        threads << Thread.current
        text("later")
      end
    end
    fiber_server(app, shutdown_timeout: 5) do |_host, port|
      sleeper = send_get(port, "/sleep")
      first = pop_within(threads)
      assert_equal "spawned", read_response(send_get(port, "/bg"))[2]
      assert_equal [200, "slept"], read_response(sleeper, timeout: 5).values_at(0, 2)
      assert_equal "later", read_response(send_get(port, "/later"), timeout: 5)[2]
      assert_same first, pop_within(threads), "the same pool thread serves on"
    end
    assert_match(/Fiber.schedule'd fiber raised: RuntimeError: bg boom/, @server_log.string)
  end

  # Fiber.schedule'd fibers are counted: a graceful stop lets them end.
  def test_graceful_stop_waits_for_scheduled_fibers
    done = Queue.new
    app = lambda do |_env|
      Fiber.schedule do
        sleep 0.3
        done << :ran
      end
      text("spawned")
    end
    fiber_server(app, shutdown_timeout: 10) do |_host, port|
      assert_equal "spawned", read_response(send_get(port, "/"))[2]
    end
    assert_equal 1, done.size, "the scheduled fiber ran to its end before the server stopped"
  end

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

  # request_timeout covers the app call only: a limit that expires while the body closes or
  # the rack.response_finished callbacks run leaves them all to run.
  def test_request_timeout_does_not_cut_body_close_or_callbacks
    ran = Queue.new
    body = Class.new do
      define_method(:each) { |&b| b.call("ok") }
      define_method(:close) do
        sleep 0.3
        ran << :closed
      end
    end
    app = lambda do |env|
      env["rack.response_finished"] << ->(*) { ran << :first_registered }
      env["rack.response_finished"] << lambda do |*|
        sleep 0.3
        ran << :second_registered
      end
      [200, { "content-type" => "text/plain", "content-length" => "2" }, body.new]
    end
    fiber_server(app, lint: false, request_timeout: 0.2) do |_host, port|
      assert_equal [200, "ok"], read_response(send_get(port, "/"), timeout: 5).values_at(0, 2)
      3.times { pop_within(ran, 5) }
    end
    assert_equal 0, ran.size
    refute_match(/RequestTimeout/, @server_log.string)
  end

  # A fiber that computes without waiting is interrupted by the supervisor, as a thread is
  # in thread mode: 503, and the thread serves on.
  def test_request_timeout_interrupts_a_computing_fiber
    app = lambda do |env|
      if env["PATH_INFO"] == "/spin"
        t = Margay::Clock.now
        nil while Margay::Clock.now - t < 5 # the supervisor gets the GVL once per time slice: a margin
        text("spun")
      else
        text("ok")
      end
    end
    fiber_server(app, request_timeout: 0.3) do |_host, port|
      assert_equal 503, read_response(send_get(port, "/spin"), timeout: 10).first
      assert_equal [200, "ok"], read_response(send_get(port, "/"), timeout: 5).values_at(0, 2)
    end
    assert_match(/request_timeout: GET \/spin ran/, @server_log.string)
  end

  # A cross-thread unblock that arrives after the wait it was for timed out (the thread was
  # busy computing) does not end the fiber's next wait.
  def test_a_late_cross_thread_unblock_does_not_cut_a_later_sleep
    m = Mutex.new
    cv = ConditionVariable.new
    waiting = Queue.new
    app = lambda do |env|
      if env["PATH_INFO"] == "/wait"
        m.synchronize do
          waiting << 1
          cv.wait(m, 0.05)
        end
        t = Margay::Clock.now
        sleep 1
        text(Margay::Clock.now - t)
      else
        t = Margay::Clock.now + 0.4
        nil while Margay::Clock.now < t
        text("spun")
      end
    end
    fiber_server(app) do |_host, port|
      waiter = send_get(port, "/wait")
      pop_within(waiting)
      sleep 0.01
      spinner = send_get(port, "/spin")
      sleep 0.15 # the pool thread spins: the cv wait's 0.05 s timer is due but cannot fire
      m.synchronize { cv.signal } # the fiber is still in cv's wait queue: an unblock from this thread
      slept = Float(read_response(waiter, timeout: 5)[2])
      assert_equal "spun", read_response(spinner, timeout: 5)[2]
      assert_operator slept, :>=, 0.9, "sleep(1) after the timed-out cv.wait ended after #{slept.round(3)}s"
    end
  end

  # A wait on an fd that cannot be armed (closed: EBADF) raises and leaves no Wait on that fd
  # number (the next IO to get it would otherwise share a stale waiter).
  def test_a_failed_arm_leaves_no_stale_wait
    app = lambda do |_env|
      r, w = IO.pipe
      stale = IO.for_fd(r.fileno, autoclose: false)
      fd = r.fileno
      r.close
      w.close
      error = begin
        stale.wait_readable(1)
        "no error"
      rescue SystemCallError, IOError => e
        e.class.name
      end
      text("#{error} #{Fiber.scheduler.instance_variable_get(:@io).key?(fd)}")
    end
    fiber_server(app) do |_host, port|
      assert_equal "Errno::EBADF false", read_response(send_get(port, "/"), timeout: 5)[2]
    end
  end
  # Cancelled timers do not pile up in the heap until due: with a sleeping request's timer
  # first in the heap, 300 requests under a 60 s request_timeout (each arms a timer and
  # cancels it) leave far fewer than 300 entries.
  def test_cancelled_timers_do_not_accumulate
    app = lambda do |env|
      sleep 2 if env["PATH_INFO"] == "/hold"
      text(Fiber.scheduler.instance_variable_get(:@timers).size)
    end
    fiber_server(app, request_timeout: 60) do |_host, port|
      hold = send_get(port, "/hold")
      sleep 0.1
      sock = TCPSocket.new("127.0.0.1", port)
      sizes = Array.new(300) do
        sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        Integer(read_response(sock, timeout: 5)[2])
      end
      sock.close
      read_response(hold, timeout: 5)
      assert_operator sizes.max, :<, 150, "timer heap entries seen: up to #{sizes.max}"
    end
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
