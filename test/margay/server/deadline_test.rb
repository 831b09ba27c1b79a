# frozen_string_literal: true

require "test_helper"
require "margay/server"

# request_timeout. Unit tests drive Deadline#check by hand on threads that
# stand in for pool threads; the last test is the whole path over the wire.
class DeadlineTest < Minitest::Test
  include Margay::TestHelper

  ENV_OF = { "REQUEST_METHOD" => "GET", "PATH_INFO" => "/slow" }.freeze

  def setup
    @log_io = StringIO.new
    @stuck = Queue.new
  end

  def deadline(timeout, grace: 5)
    Margay::Server::Deadline.new(timeout, log: Margay::Log.new(out: @log_io, err: @log_io), grace: grace,
                                          on_stuck: -> { @stuck << true })
  end

  # A thread like a pool thread (RequestTimeout deferred outside the app
  # call) running +app+ under +deadline+; its value is what the call raised.
  def pool_thread(deadline, &app)
    Thread.new do
      Thread.handle_interrupt(Margay::RequestTimeout => :never) do
        deadline.track(ENV_OF, &app)
        :finished
      rescue Margay::RequestTimeout => e
        e
      end
    end
  end

  # Run the supervisor's check on +threads+ until +done+ is true (at most 5 s).
  def check_until(deadline, threads)
    Timeout.timeout(5) do
      until yield
        deadline.check(threads)
        sleep 0.005 # the supervisor's tick
      end
    end
  end

  def test_a_call_past_the_timeout_gets_request_timeout
    skip_on_jruby "JRuby's backtrace of another thread is taken at its next safepoint, not in Kernel#sleep"
    deadline = deadline(0.05)
    running = Queue.new
    thread = pool_thread(deadline) do
      running << true
      sleep 30
    end
    pop_within(running)
    check_until(deadline, [thread]) { !thread.alive? }
    assert_kind_of Margay::RequestTimeout, thread.value
    assert_match(%r{\AERROR: request_timeout: GET /slow ran 0\.\ds \(limit 0\.05s\)\n    .*in `sleep'}, @log_io.string)
  end

  def test_a_call_within_the_timeout_is_left_alone
    deadline = deadline(30)
    thread = pool_thread(deadline) { :ok }
    deadline.check([thread])
    assert_equal :finished, thread.value
    assert_empty @log_io.string
  end

  def test_a_thread_outside_a_tracked_call_is_not_interrupted
    deadline = deadline(0.01)
    gate = Queue.new
    thread = Thread.new { gate.pop }
    started = Margay::Clock.now
    deadline.check([thread]) while Margay::Clock.now - started < 0.05
    assert thread.alive?
    gate << :done
    assert_equal :done, thread.value
    assert_empty @log_io.string
  end

  # A call blocked where interrupts cannot reach it is reported once, after
  # the grace period: in a cluster its worker then replaces itself.
  def test_a_call_ignoring_its_interrupt_is_reported_once_after_grace
    deadline = deadline(0.01, grace: 0.05)
    gate = Queue.new
    thread = pool_thread(deadline) do
      Thread.handle_interrupt(Margay::RequestTimeout => :never) { gate.pop } # a C call that ignores interrupts
    end
    check_until(deadline, [thread]) { !@stuck.empty? }
    started = Margay::Clock.now
    deadline.check([thread]) while Margay::Clock.now - started < 0.05
    assert_equal 1, @stuck.size, "on_stuck once, not on every check"
    assert_equal 1, @log_io.string.scan("ignores its interrupt for 0.05s: capacity lost").size
    gate << :go
    assert_kind_of Margay::RequestTimeout, thread.value, "the interrupt lands once the call lets it"
  end

  def test_a_late_request_gets_503_and_its_thread_comes_back
    skip_on_jruby "JRuby's backtrace of another thread is taken at its next safepoint, not in Kernel#sleep"
    app = ->(env) { env["PATH_INFO"] == "/hang" ? (sleep 30; HELLO.call(env)) : HELLO.call(env) }
    with_server(app, request_timeout: 0.3, min_threads: 1, max_threads: 1) do |_, port|
      started = Margay::Clock.now
      raw = raw_exchange(port, "GET /hang HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 503 }, raw)
      assert_operator Margay::Clock.now - started, :<, 3
      3.times do
        assert_match(/hello\z/, raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
      end
      assert_match(%r{request_timeout: GET /hang ran 0\.\d+s \(limit 0\.3s\)\n    .*in `sleep'}, @server_log.string)
    end
  end
end
