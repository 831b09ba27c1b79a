# frozen_string_literal: true

require "test_helper"
require "support/master_side"

# What the master does once a worker process is gone (Margay::Cluster::Exits),
# with real child processes: the worker leaves the roster, its links close,
# a boot failure backs off, and after_worker_shutdown runs once with the
# exit status (or without one, a second later).
class ExitsTest < Minitest::Test
  skip_on_jruby "no cluster: JRuby has no fork"
  include Margay::MasterSide
  Cluster = Margay::Cluster

  def setup
    super
    @board = Margay::Native::IdleBoard.new(4)
    @forwarder = Cluster::Balancer::Forwarder.new(roster: @roster, board: @board, log: @log)
    @back_off = Cluster::BackOff.new(log: @log, clock: @clock)
    @shutdowns = []
  end

  def new_exits(hook: true)
    hooks = hook ? { after_worker_shutdown: [->(w) { @shutdowns << w }] } : {}
    Cluster::Exits.new(config: Margay::Configuration.new(workers: 2, hooks: hooks), log: @log, roster: @roster,
                       forwarder: @forwarder, board: @board, back_off: @back_off, clock: @clock)
  end

  # A worker record in the roster for process +pid+ (a child of the test, or not).
  def worker(index, pid, booted: true)
    add_worker(index, pid, booted: booted).first
  end

  # A child process that exits with +code+; returns [pid, its status].
  def exited_child(code)
    Process.wait2(Process.spawn("sh", "-c", "exit #{code}"))
  end

  def test_a_gone_worker_leaves_the_roster_and_after_worker_shutdown_gets_its_status
    exits = new_exits
    pid, status = exited_child(3)
    w = worker(1, pid)
    exits.forget(w, status, stopping: false)
    assert_empty @roster
    assert w.channel.ios.all?(&:closed?), "its links are closed"
    assert_equal [[1, pid, 3, true, true, 0]],
                 @shutdowns.map { |h| [h.index, h.pid, h.process_status.exitstatus, h.booted?, h.term?, h.phase] }
    assert_match(/master: worker 1 \(pid #{pid}\) exited: /, @out.string)
    assert_equal 0, @back_off.failures, "it served: no back-off"
    assert_nil exits.forget(w, status, stopping: false), "forgotten once"
    assert_equal 1, @shutdowns.size
  end

  def test_a_worker_that_never_booted_backs_off
    pid, status = exited_child(1)
    new_exits.forget(worker(0, pid, booted: false), status, stopping: false)
    assert_equal 1, @back_off.failures
    assert at(Margay::Clock.now + 0.5) { @back_off.waiting? }
    assert_match(/worker boot failed 1 time\(s\)/, @out.string)
    refute @shutdowns.first.booted?
  end

  def test_a_stopping_worker_that_exits_cleanly_and_any_exit_during_a_stop_are_not_logged
    exits = new_exits
    pid, status = exited_child(0)
    w = worker(0, pid)
    w.stopping!(0.0)
    exits.forget(w, status, stopping: false)
    pid, status = exited_child(2)
    exits.forget(worker(1, pid), status, stopping: true)
    refute_match(/exited/, @out.string)
    assert_equal [0, 2], @shutdowns.map { |h| h.process_status.exitstatus }, "the hook runs all the same"
  end

  def test_the_mold_gets_no_hook_and_no_back_off
    pid, status = exited_child(1)
    mold = worker(0, pid, booted: false)
    mold.mold_pending!
    new_exits.forget(mold, status, stopping: false)
    assert_empty @shutdowns
    assert_equal 0, @back_off.failures
    assert_match(/master: the mold \(pid #{pid}\) exited/, @out.string)
  end

  def test_no_hook_nothing_waits
    pid, status = exited_child(0)
    exits = new_exits(hook: false)
    exits.forget(worker(0, pid), status, stopping: false)
    exits.report(flush: true)
    assert_empty @shutdowns
    assert_empty @roster
  end

  def test_reap_forgets_a_worker_whose_status_comes_first
    exits = new_exits
    pid = child("sh", "-c", "exit 4")
    worker(2, pid)
    deadline = Margay::Clock.now + 5
    until @roster.empty? || Margay::Clock.now > deadline
      sleep 0.01
      exits.reap(stopping: false)
    end
    assert_empty @roster
    assert_equal [[2, 4]], @shutdowns.map { |h| [h.index, h.process_status.exitstatus] }
  end

  # Its heartbeat pipe's EOF came first: the hook waits for the status, which reap collects.
  def test_the_hook_waits_for_the_status_of_a_worker_whose_pipe_closed_first
    exits = new_exits
    r, w = IO.pipe
    pid = child("cat", in: r, out: File::NULL)
    r.close
    exits.forget(worker(0, pid), nil, stopping: false)
    exits.report
    assert_empty @shutdowns, "still running: no status yet"
    w.close
    deadline = Margay::Clock.now + 5
    until !@shutdowns.empty? || Margay::Clock.now > deadline
      sleep 0.01
      exits.reap(stopping: false)
      exits.report
    end
    assert_equal [[pid, true]], @shutdowns.map { |h| [h.pid, h.process_status&.success?] }
  end

  # A process that is not the master's child (a worker the mold forked,
  # without a subreaper): its status never comes.
  def test_without_a_status_the_hook_runs_a_second_later_or_at_a_flush
    exits = new_exits
    now = Margay::Clock.now
    at(now) { exits.forget(worker(0, Process.pid), nil, stopping: false) }
    at(now + 0.9) { exits.report }
    assert_empty @shutdowns
    at(now + 1.1) { exits.report }
    assert_equal [[Process.pid, nil]], @shutdowns.map { |h| [h.pid, h.process_status] }

    at(now) { exits.forget(worker(1, Process.pid), nil, stopping: false) }
    at(now) { exits.report(flush: true) }
    assert_equal [0, 1], @shutdowns.map(&:index), "a flush runs it at once"
  end
end
