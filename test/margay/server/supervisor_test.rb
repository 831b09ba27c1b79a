# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "margay/server"

# The main thread's tick, with a recording pool, engine and deadline in place
# of the real ones; it runs until on_tick has seen enough ticks and stops it.
class SupervisorTest < Minitest::Test
  Supervisor = Margay::Server::Supervisor

  # Records the growth looks it is given.
  class Pool
    attr_reader :looks

    def initialize
      @looks = []
      @replacements = 0
    end

    attr_writer :room
    attr_reader :replacements

    def replace_lost
      @replacements += 1
      false
    end

    def consider_growth(saturated:, cpu_share:)
      @looks << [saturated, cpu_share]
      false
    end

    def room?
      @room != false
    end

    # A pool thread blocked (asleep) for the whole test: never runnable, no run delay.
    SLEEPER = Thread.new { sleep }

    def native_ids
      [SLEEPER.native_thread_id]
    end

    def threads
      [:a_thread]
    end

    def busy = 0
  end

  Engine = Struct.new(:saturated_ms, :stopping, :busy_threads) do
    def stopping? = !!stopping
  end

  # Records what it was asked to check.
  class Deadline
    attr_reader :checks

    def initialize
      @checks = []
    end

    def check(threads)
      @checks << threads
    end
  end

  def setup
    @stop_r, @stop_w = IO.pipe
    @pool = Pool.new
    @ticks = 0
  end

  def teardown
    @stop_r.close
    @stop_w.close
  end

  # Supervise until +ticks+ ticks have passed.
  def supervise(ticks, engine: Engine.new(0), **options)
    on_tick = lambda do
      @ticks += 1
      @stop_w.write(".") if @ticks == ticks
    end
    Timeout.timeout(10) { Supervisor.new(pool: @pool, engine: engine, on_tick: on_tick, **options).run(@stop_r) }
    @stop_r.read_nonblock(16) # ready for the next run
  end

  def test_every_tick_looks_at_the_pool_and_calls_on_tick
    supervise(20, engine: Engine.new(3))
    assert_equal 20, @ticks
    assert_equal 20, @pool.looks.size
    assert(@pool.looks.all? { |saturated, share| saturated && share >= 0 })
    assert_equal 20, @pool.replacements, "every tick asks the pool to replace a lost thread"
  end

  # An error no path handles yet (here on_tick's, a worker's heartbeat and balancing, and the
  # growth look's) used to leave the main thread and end the process: the ticks go on, the
  # other steps still run (the request deadlines), and each error is said once.
  def test_a_raising_step_is_said_once_and_the_other_steps_run
    out = StringIO.new
    on_tick = lambda do
      @ticks += 1
      @stop_w.write(".") if @ticks == 20
      raise Errno::ENOMEM, "a heartbeat"
    end
    pool = Class.new(Pool) { def consider_growth(**) = raise(ArgumentError, "a look") }.new
    deadline = Deadline.new
    Timeout.timeout(10) do
      Supervisor.new(pool: pool, engine: Engine.new(0), on_tick: on_tick, deadline: deadline,
                     log: Margay::Log.new(out: out, err: out)).run(@stop_r)
    end
    assert_equal 20, @ticks
    assert_equal 20, pool.replacements, "the step after the failing look ran every tick"
    assert_equal 2, deadline.checks.size, "deadlines checked every tenth tick"
    %w[Errno::ENOMEM ArgumentError].each do |error|
      assert_equal 1, out.string.scan("ERROR: supervisor tick (serving on; said once): #{error}").size, out.string
    end
  end

  def test_no_thread_is_replaced_once_the_engine_stops
    supervise(5, engine: Engine.new(0, true))
    assert_equal 0, @pool.replacements, "the pool's threads are leaving on their own"
  end

  # A worker among more busy processes than cores gets less CPU than it wants: the time its
  # threads waited for a CPU counts as computing, so its pool does not grow for nothing.
  # Real time; no CPU used; its threads waited for a CPU the whole time (+waiting+: the run
  # delay is the time the tick read, so it grows exactly with the tick's clock, however late
  # in the tick a loaded machine gets to read it) or never. +reads+ counts the readings.
  # +runnable+: a pool thread is runnable at each look (waiting for a CPU since before it).
  class QueueClock
    attr_reader :reads

    def initialize(waiting:, runnable: false)
      @waiting = waiting
      @runnable = runnable
      @reads = 0
      @now = nil
    end

    def runnable?(_tids) = @runnable

    def now = (@now = Margay::Clock.now)

    def cpu = 1.0

    def run_delay(_tids)
      @reads += 1
      @waiting ? @now : 0.0
    end
  end

  # Monotonic time that moves 250 ms (exact in binary) each time it is read (no CPU used).
  class StepClock
    def initialize = (@now = 100.0)
    def now = (@now += 0.25)
    def cpu = 0.0
  end

  def test_busy_time_adds_the_busy_threads_times_each_ticks_length
    @pool.define_singleton_method(:busy) { 3 }
    supervisor = nil
    on_tick = lambda do
      @ticks += 1
      @stop_w.write(".") if @ticks == 4
    end
    Timeout.timeout(10) do
      supervisor = Supervisor.new(pool: @pool, engine: Engine.new(0), on_tick: on_tick, clock: StepClock.new)
      assert_equal 0, supervisor.busy_ms
      supervisor.run(@stop_r)
    end
    assert_equal 3000, supervisor.busy_ms, "3 threads busy over 4 ticks of 250 ms"
  end

  def test_time_waiting_for_a_cpu_counts_as_computing
    supervise(5, engine: Engine.new(3), clock: QueueClock.new(waiting: true))
    shares = @pool.looks.map(&:last)
    assert_equal 0.0, shares.first, "the first saturated look has no earlier reading: CPU time alone"
    assert(shares.drop(1).all? { |share| share > 0.9 }, "waited for a CPU the whole time: #{shares.inspect}")
  end

  def test_a_saturated_process_neither_computing_nor_waiting_for_a_cpu_looks_blocked
    supervise(5, engine: Engine.new(3), clock: QueueClock.new(waiting: false))
    shares = @pool.looks.map(&:last)
    assert_equal [0.0, 0.0, 0.0, 0.0, 0.0], shares, "the first look has no earlier reading (CPU time alone), then blocked"
  end

  # The kernel adds a wait for a CPU to run_delay only when it ends: a thread descheduled
  # across two looks shows neither CPU time nor a wait, and the process looked blocked. A look
  # that finds a pool thread runnable is not a blocked one; its share is kept.
  def test_a_pool_thread_runnable_at_a_low_look_is_not_blocked
    supervise(5, engine: Engine.new(3), clock: QueueClock.new(waiting: false, runnable: true))
    assert_equal [[false, 0.0]] * 5, @pool.looks, "saturated, low, and a thread runnable: not blocked"
  end

  def test_a_runnable_thread_is_told_from_a_blocked_one
    skip_on_jruby "JRuby's Thread#native_thread_id is not the thread's kernel id (the JVM's first thread's, asleep)"
    blocked = Thread.new { sleep }
    sleep 0.01 until blocked.status == "sleep"
    refute Margay::Clock.runnable?([blocked.native_thread_id])
    assert Margay::Clock.runnable?([Thread.current.native_thread_id]), "the reading thread runs"
    refute Margay::Clock.runnable?([0]), "a thread gone counts as not runnable"
  ensure
    blocked&.kill&.join
  end

  # Seen in the slow suite under CPU load: with every descriptor taken (a
  # flood, or the app), reading the run queue raised EMFILE out of the tick
  # and the server exited. The look goes on with CPU time alone.
  def test_the_run_queue_unreadable_for_want_of_descriptors_is_not_fatal
    used = Dir.children("/proc/self/fd").size
    soft, hard = Process.getrlimit(:NOFILE)
    held = []
    Process.setrlimit(:NOFILE, used + 16, hard)
    begin
      loop { held << File.open(File::NULL) }
    rescue Errno::EMFILE
      nil
    end
    assert_raises(Errno::EMFILE) { File.read("/proc/self/stat") }
    assert_nil Margay::Clock.run_delay([Thread.current.native_thread_id])
    supervise(3, engine: Engine.new(3)) # the real clock; a saturated pool with room
    assert_equal 3, @pool.looks.size
  ensure
    held.each(&:close)
    Process.setrlimit(:NOFILE, soft, hard)
  end

  def test_the_run_queue_is_not_read_when_the_pool_cannot_grow
    @pool.room = false
    clock = QueueClock.new(waiting: true)
    supervise(3, engine: Engine.new(3), clock: clock)
    assert_equal [0.0] * 3, @pool.looks.map(&:last), "CPU time alone"
    assert_equal 0, clock.reads
  end

  def test_the_run_queue_is_not_read_while_a_thread_waits_for_work
    clock = QueueClock.new(waiting: true)
    supervise(3, clock: clock)
    assert_equal [false] * 3, @pool.looks.map(&:first)
    assert_equal 0, clock.reads
  end

  def test_a_pool_with_a_waiting_thread_is_not_saturated
    supervise(3)
    assert_equal [false] * 3, @pool.looks.map(&:first)
  end

  def test_deadlines_are_checked_every_tenth_tick
    deadline = Deadline.new
    supervise(25, deadline: deadline)
    assert_equal [[:a_thread]] * 2, deadline.checks
  end

  def test_a_stop_already_requested_ends_it_at_once
    @stop_w.write(".")
    Supervisor.new(pool: @pool, engine: Engine.new(0), on_tick: -> { flunk "ticked" }).run(@stop_r)
    assert_empty @pool.looks
  end

  def test_the_systemd_watchdog_is_pinged_when_due
    skip_on_jruby "JRuby's Socket has no UNIX datagram sockets (sd_notify's)"
    Dir.mktmpdir do |dir|
      path = File.join(dir, "notify")
      listener = Socket.new(:UNIX, :DGRAM)
      listener.bind(Socket.pack_sockaddr_un(path))
      saved = ENV.fetch("NOTIFY_SOCKET", nil)
      ENV["NOTIFY_SOCKET"] = path
      supervise(3, watchdog: 0.0) # due on every tick
      supervise(6, watchdog: 3600) # never due within the test
      assert_equal 6, @ticks
      pings = []
      while (message = listener.recv_nonblock(64, exception: false)) != :wait_readable
        pings << message
      end
      assert_equal ["WATCHDOG=1"] * 3, pings
    ensure
      ENV["NOTIFY_SOCKET"] = saved
      listener&.close
    end
  end

  # The engine's request count and the pool's busy threads, as idle_timeout reads them.
  class CountingEngine
    attr_accessor :requests, :busy_threads

    def initialize
      @requests = 0
    end

    def saturated_ms
      0
    end

    def stopping?
      false
    end

    def stats
      { requests: @requests }
    end
  end

  def test_idle_timeout_returns_after_that_long_without_a_request
    @pool.define_singleton_method(:busy) { 0 }
    engine = CountingEngine.new
    log = StringIO.new
    started = Margay::Clock.now
    Timeout.timeout(10) do
      Supervisor.new(pool: @pool, engine: engine, idle_timeout: 0.3, log: Margay::Log.new(out: log)).run(@stop_r)
    end
    assert_operator Margay::Clock.now - started, :>=, 0.3
    assert_match(/no request for 0.3s \(idle_timeout\): stopping/, log.string)
  end

  def test_requests_or_a_busy_thread_keep_idle_timeout_away
    [[0, true], [1, false]].each do |busy, counting|
      @ticks = 0
      @pool = Pool.new
      @pool.define_singleton_method(:busy) { busy }
      engine = CountingEngine.new
      on_tick = lambda do
        @ticks += 1
        engine.requests += 1 if counting # a request every tick, or one that runs all along
        @stop_w.write(".") if @ticks == 120
      end
      Timeout.timeout(10) do
        Supervisor.new(pool: @pool, engine: engine, on_tick: on_tick, idle_timeout: 0.1).run(@stop_r)
      end
      @stop_r.read_nonblock(16)
      assert_equal 120, @ticks, "only the stop ended it (busy #{busy})"
    end
  end
end
