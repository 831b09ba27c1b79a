# frozen_string_literal: true

require "test_helper"
require "margay/clock"
require "io/wait"
require "tempfile"
require_relative "fiber_test_helper"

# Fiber mode's scheduler (Server::FiberScheduler), over real sockets: fibers waiting on one
# fd, IO.select, Fiber.schedule'd fibers (their errors, a graceful stop), unblocks from other
# threads, arming failures, cancelled timers. Behaviour is asserted (who woke, what was
# answered, which thread), never wall time except as a generous bound.
class FiberSchedulerTest < Minitest::Test
  skip_on_jruby "no fiber mode: it needs the C engine's epoll"
  include Margay::TestHelper
  include FiberTestHelper

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

  # A regular file cannot be polled: a wait on it is over at once, not an error (an app's log
  # appends waited so now and then under load). It was a 500: the wait's own cleanup asked
  # epoll to forget the file, and epoll_ctl's EPERM was raised.
  def test_a_wait_on_a_regular_file_is_over_at_once
    app = lambda do |_env|
      Tempfile.create("fiber-wait") do |f|
        text(f.wait_writable(1).equal?(f) ? "ready" : "not ready")
      end
    end
    fiber_server(app) do |_host, port|
      assert_equal [200, "ready"], read_response(send_get(port, "/"), timeout: 5).values_at(0, 2)
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
end
