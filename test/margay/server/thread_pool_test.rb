# frozen_string_literal: true

require "test_helper"
require "margay/server"

# The pool on its own: its threads run a block standing in for the server's
# request loop, held on a gate so that the test decides when they finish.
class ThreadPoolTest < Minitest::Test
  include Margay::TestHelper

  ThreadPool = Margay::Server::ThreadPool

  def setup
    @gate = Queue.new
    @started = Queue.new
    @pools = []
  end

  def teardown
    @pools.each { |pool| pool.force_stop(1) }
  end

  # Each thread reports that it runs, then waits at the gate.
  def pool(min:, max:, idle_timeout: 10, &work)
    work ||= lambda do |_pool|
      @started << Thread.current
      @gate.pop
    end
    ThreadPool.new(min: min, max: max, idle_timeout: idle_timeout, &work).tap { |p| @pools << p }
  end

  def test_start_runs_min_threads
    pool = pool(min: 2, max: 4).start
    threads = [pop_within(@started), pop_within(@started)]
    assert_equal 2, pool.size
    assert_equal threads.sort_by(&:object_id), pool.threads.sort_by(&:object_id)
    assert_equal %w[margay-0 margay-1], pool.threads.map(&:name).sort
  end

  def test_grow_adds_one_thread_up_to_max
    pool = pool(min: 1, max: 3).start
    assert pool.grow
    assert pool.grow
    refute pool.grow, "already at max"
    3.times { pop_within(@started) }
    assert_equal 3, pool.size
  end

  # The system refuses a thread (here the address space is full: a
  # container's pids limit does the same): #grow says so once, returns false,
  # and asks again only after retry_after; the supervisor's tick used to take
  # the ThreadError and the server exited. In a child process, whose address
  # space limit it lowers once enough threads run that no stack of an ended
  # thread is left for reuse (the child gets the stacks of the parent's other
  # threads to reuse).
  def test_a_thread_the_system_refuses_is_said_once_and_asked_for_again_later
    skip_on_jruby "no fork"
    if Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.3")
      skip "Ruby 3.3.8: after a refused Thread.new the process hangs at its next thread operation " \
           "(Thread.list, a pipe write), whatever the pool does (docs/CONFIGURATION.md, threads)"
    end
    if ENV["LD_PRELOAD"].to_s.include?("libasan")
      skip "under ASan (rake test:asan) the lowered address space limit refuses ASan's own " \
           "bookkeeping for the new thread, and ASan ends the child before Thread.new can raise"
    end
    r, w = IO.pipe
    pid = fork do
      r.close
      out = StringIO.new
      log = Margay::Log.new(out: out, err: out)
      pool = ThreadPool.new(min: 1, max: 4, idle_timeout: 60, log: log, retry_after: 0.5) { sleep 30 }
      pool.start
      Array.new(512) { Thread.new { sleep 30 } } # more than any stack cache the child may have inherited
      vm_size = File.read("/proc/self/status")[/^VmSize:\s+(\d+)/, 1].to_i * 1024
      soft, hard = Process.getrlimit(:AS)
      Process.setrlimit(:AS, vm_size + (256 << 10), hard)
      results = Array.new(2) do
        pool.grow
      rescue Exception => e # rubocop:disable Lint/RescueException -- reported to the parent
        e.class.name
      end
      Process.setrlimit(:AS, soft, hard)
      results << pool.room?
      sleep 0.6
      results << pool.grow << pool.size
      w.write(Marshal.dump([results, out.string]))
      w.close
      exit!(0)
    end
    w.close
    flunk "the child did not answer within 30 s (a Thread.new that never returns?)" unless r.wait_readable(30)
    results, log = Marshal.load(r.read) # rubocop:disable Security/MarshalLoad -- our own child
    assert_equal [false, false, false, true, 2], results,
                 "refused; not asked again (no room) until retry_after; then a thread starts"
    assert_equal 1, log.scan("could not start another pool thread").size, log
  ensure
    r&.close
    if pid
      Process.kill(:KILL, pid) unless Process.wait(pid, Process::WNOHANG)
      Process.wait(pid) rescue nil # rubocop:disable Style/RescueModifier -- reaped already
    end
  end

  # A thread whose loop raises (in fiber mode: no descriptor left for its wait set) used to
  # end silently: the pool stayed under min, and with one thread nothing served again. It is
  # logged, and the supervisor's #replace_lost starts another after replace_after, no sooner
  # (nor does the pool grow meanwhile): a cause that lasts costs a thread a second, not a tick.
  def test_a_thread_lost_to_an_exception_is_logged_and_replaced_after_a_pause
    out = StringIO.new
    failures = Queue.new
    2.times { failures << Errno::EMFILE.new("epoll_create1") }
    pool = ThreadPool.new(min: 2, max: 4, idle_timeout: 10, log: Margay::Log.new(out: out, err: out),
                          replace_after: 1) do
      raise failures.pop(true) unless failures.empty?

      @started << Thread.current
      @gate.pop
    end
    @pools << pool
    pool.start
    Timeout.timeout(5) { sleep 0.01 until pool.size.zero? }
    assert_equal 2, out.string.scan(/ERROR: pool thread margay-\d ended \(\d left; another starts in 1s/).size, out.string
    assert_includes out.string, "Errno::EMFILE: Too many open files - epoll_create1"
    refute pool.replace_lost, "not before replace_after"
    refute pool.grow, "no growth either"
    sleep 1.05
    assert_equal [true, true, false], Array.new(3) { pool.replace_lost }, "two, then min is reached"
    2.times { pop_within(@started) }
    assert_equal 2, pool.size
  end

  # `exit` in a thread hook (before_thread_start runs in the pool thread) ends the process, as
  # Ruby does for a thread's `exit`: it is not a lost thread to replace.
  def test_exit_in_a_pool_thread_still_ends_the_process
    skip_on_jruby "no fork"
    pid = fork do
      ThreadPool.new(min: 1, max: 1, idle_timeout: 10) { exit 3 }.start
      sleep 60 # ended by the thread's exit long before, however loaded the machine
      exit!(0)
    end
    status = Timeout.timeout(60) { Process.wait2(pid).last }
    assert_equal 3, status.exitstatus
  ensure
    Process.kill(:KILL, pid) if pid && status.nil?
  end

  def test_room_and_the_kernel_ids_of_its_threads
    skip_on_jruby "JRuby's Thread#native_thread_id is not the kernel's thread id"
    pool = pool(min: 1, max: 2).start
    first = pop_within(@started)
    assert pool.room?
    assert_equal [first.native_thread_id], pool.native_ids
    assert pool.grow
    second = pop_within(@started)
    refute pool.room?, "at max"
    assert_equal [first, second].map(&:native_thread_id).sort, pool.native_ids.sort
    refute_includes pool.native_ids, Process.pid, "never the main thread"
  end

  def test_growth_needs_two_blocked_looks_in_a_row_and_goes_to_max
    pool = pool(min: 1, max: 5).start
    refute pool.consider_growth(saturated: true, cpu_share: 0.1)
    refute pool.consider_growth(saturated: true, cpu_share: 0.9), "a computing process breaks the run"
    refute pool.consider_growth(saturated: true, cpu_share: 0.1)
    refute pool.consider_growth(saturated: false, cpu_share: 0.1), "a waiting thread breaks the run"
    assert_equal 1, pool.size
    refute pool.consider_growth(saturated: true, cpu_share: 0.1)
    assert pool.consider_growth(saturated: true, cpu_share: 0.1)
    assert_equal 5, pool.size, "every thread was blocked: up to max at once"
    3.times { refute pool.consider_growth(saturated: true, cpu_share: 0.1) }
  end

  def test_a_busy_process_never_grows
    pool = pool(min: 1, max: 4).start
    10.times { pool.consider_growth(saturated: true, cpu_share: 1.0) }
    assert_equal 1, pool.size
  end

  def test_on_demand_growth_is_one_thread_at_a_time_until_looks_find_the_process_computing
    pool = pool(min: 1, max: 4).start
    pop_within(@started)
    assert pool.grow_on_demand?, "as Puma: a thread per request waiting"
    assert pool.grow_on_demand
    assert pool.grow_on_demand
    assert_equal 3, pool.size
    threads = Array.new(2) { pop_within(@started) }
    pool.consider_growth(saturated: true, cpu_share: 0.9)
    assert pool.grow_on_demand?, "one computing look is not enough"
    refute pool.retire?(threads[0])
    pool.consider_growth(saturated: true, cpu_share: 0.9)
    refute pool.grow_on_demand?, "a computing process serves on the threads it has"
    refute pool.grow_on_demand
    assert pool.retire?(threads[0]), "and the threads started on demand leave"
    assert pool.retire?(threads[1])
    refute pool.retire?(pool.threads.first), "only those"
    assert_equal 1, pool.size
    pool.consider_growth(saturated: true, cpu_share: 0.1)
    refute pool.grow_on_demand?, "one blocked look (a scattered share) does not start it again"
    assert pool.consider_growth(saturated: true, cpu_share: 0.1), "two grow the pool to max"
    assert_equal 4, pool.size
    2.times { @gate << :go } # the two that left the pool
  end

  def test_threads_started_on_demand_that_idled_away_are_not_retired_twice
    pool = pool(min: 1, max: 4, idle_timeout: 0.25).start
    2.times { pool.grow_on_demand }
    threads = Array.new(3) { pop_within(@started) }
    assert pool.leave?(threads[1])
    2.times { pool.consider_growth(saturated: true, cpu_share: 0.9) }
    assert pool.retire?(threads[2])
    refute pool.retire?(threads[0]), "one was started on demand and left idle, one retired: min stays"
    2.times { @gate << :go } # the two that left the pool
  end

  def test_idle_threads_above_min_may_leave_and_min_stay
    pool = pool(min: 1, max: 3, idle_timeout: 0.25).start
    2.times { pool.grow }
    threads = Array.new(3) { pop_within(@started) }
    assert_equal 250, pool.idle_budget, "above min a thread may idle for idle_timeout"
    assert pool.leave?(threads[0])
    assert pool.leave?(threads[1])
    assert_nil pool.idle_budget, "at min threads wait forever"
    refute pool.leave?(threads[2]), "the pool keeps min threads"
    assert_equal [threads[2]], pool.threads
  end

  def test_join_waits_for_threads_to_finish
    pool = pool(min: 2, max: 2).start
    2.times { pop_within(@started) }
    refute pool.join(0.05), "the threads are still at the gate"
    2.times { @gate << :go }
    assert pool.join(5)
    assert_equal 0, pool.size
  end

  def test_force_stop_raises_force_shutdown_in_busy_threads
    interrupted = Queue.new
    pool = pool(min: 2, max: 4) do |_pool|
      @started << Thread.current
      @gate.pop
    rescue Margay::ForceShutdown => e
      interrupted << e
      raise
    end
    pool.start
    2.times { pop_within(@started) }
    pool.force_stop(5)
    assert_equal [Margay::ForceShutdown] * 2, Array.new(2) { pop_within(interrupted).class }
    assert_equal 0, pool.size
    refute pool.grow, "a stopped pool starts no thread"
  end

  def test_busy_counts_threads_running_the_app
    pool = pool(min: 1, max: 1)
    pool.busy!
    pool.busy!
    pool.idle!
    assert_equal 1, pool.busy
  end

  # A forced stop can come before a new thread has run a line of its own.
  # JRuby runs the pool's threads in parallel: a count kept with += would lose updates.
  def test_busy_stays_exact_when_threads_count_at_once
    pool = pool(min: 1, max: 1) { |_pool| nil }
    counters = Array.new(8) { Thread.new { 20_000.times { pool.busy! && pool.idle! } } }
    counters.each(&:join)
    assert_equal 0, pool.busy
  end

  def test_force_stop_right_after_start_is_quiet
    20.times do
      pool = pool(min: 2, max: 2).start
      pool.force_stop(5)
      assert_equal 0, pool.size
    end
  end
end
