# frozen_string_literal: true

require "test_helper"
require "margay/cluster/worker_record"
require "margay/cluster/channel"

# The master's record of one worker (Margay::Cluster::WorkerRecord): the
# states a worker goes through and what the master asks of them.
class WorkerRecordTest < Minitest::Test
  skip_on_jruby "no cluster: JRuby has no fork"
  WorkerRecord = Margay::Cluster::WorkerRecord

  def record(index: 1, pid: 4711)
    WorkerRecord.new(index: index, pid: pid, channel: nil, now: 100.0)
  end

  def test_a_new_worker_boots_and_serves
    w = record
    assert_equal 100.0, w.last_beat, "its boot timeout runs from its start"
    assert w.serving?, "a booting worker counts as serving (it will)"
    refute w.booted?
    w.booted!
    assert w.booted?
    assert w.serving?
    assert_equal "worker 1 (pid 4711)", w.to_s
  end

  def test_retiring_is_a_mark_and_stopping_ends_serving
    w = record
    w.retire_later!
    assert w.retiring?
    assert w.serving?, "marked, it serves until its turn comes"
    assert_nil w.stop_at
    w.stopping!(200.0)
    assert w.stopping?
    refute w.serving?
    w.stopping!(300.0)
    assert_equal 200.0, w.stop_at, "its grace period runs from the first time it was told"
  end

  def test_the_mold_is_pending_then_ready_and_never_serves
    w = record
    refute w.mold?
    w.mold_pending!
    assert w.mold?
    assert w.pending_mold?
    refute w.ready_mold?
    refute w.serving?
    w.mold_ready!
    assert w.mold?
    assert w.ready_mold?
    refute w.pending_mold?
  end

  def test_heartbeat_timeout_is_the_boot_timeout_until_it_booted
    config = Margay::Configuration.new(worker_timeout: 7, worker_boot_timeout: 30)
    w = record
    assert_equal 30, w.heartbeat_timeout(config)
    w.booted!
    assert_equal 7, w.heartbeat_timeout(config)
    mold = record
    mold.mold_pending!
    assert_equal 7, mold.heartbeat_timeout(config), "a mold beats from its first second"
  end

  def test_memory_of_a_process
    assert_operator record(pid: Process.pid).rss_bytes, :>, 1024 * 1024
  end

  # /proc unreadable and no ps to ask (a slim image; or no descriptor for
  # either): unknown, not an exception out of the master's health check.
  def test_memory_unknown_without_proc_or_ps
    gone = Process.spawn("true").tap { |pid| Process.wait(pid) } # a pid with no /proc entry
    path = ENV.fetch("PATH", nil)
    ENV["PATH"] = "/nonexistent" # no ps there
    assert_nil record(pid: gone).rss_bytes
  ensure
    ENV["PATH"] = path
  end

  def test_kill_a_process
    pid = Process.spawn("sleep", "30")
    w = record(pid: pid)
    w.kill(:KILL)
    Process.wait(pid)
    assert_nil w.kill(:TERM), "a process that is gone is no error"
  end

  def test_its_stats_entry_has_pumas_worker_status_shape
    master, worker = Margay::Cluster::Channel.pair
    w = WorkerRecord.new(index: 2, pid: 4711, channel: master, now: 100.0)
    entry = w.to_stats(3)
    assert_equal %i[started_at pid index phase booted last_checkin last_status], entry.keys
    assert_equal({}, entry[:last_status], "Puma's last_status is {} before the first check-in")
    assert_equal [4711, 2, 3, false], entry.values_at(:pid, :index, :phase, :booted)
    assert_match(/\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\z/, entry[:started_at])
    status = Margay::Cluster::Channel::STATUS_KEYS.each_with_index.to_h { |key, i| [key, i] }
    worker.report(:booted, status)
    master.read_reports
    w.booted!
    w.retire_later!
    entry = w.to_stats(3)
    assert_equal status.slice(*Margay::Stats::COUNTERS), entry[:last_status], "Puma's keys only"
    all = w.to_stats(3, all: true)[:last_status]
    assert_equal status.slice(*Margay::Stats::COUNTERS, *Margay::Stats::OWN_COUNTERS), all.except(*Margay::Stats::HISTOGRAMS),
                 "for the metrics: Margay's own counters too, the memory apart (to_memory)"
    assert_equal Margay::Stats.histograms_from(status), all.slice(*Margay::Stats::HISTOGRAMS), "and the histograms, rebuilt"
    assert_equal 32, all[:queue_time_seconds][:count], "the +Inf bucket's count"
    assert_equal({ index: 2, pid: 4711, mold: false,
                   memory: { rss_kib: 9, pss_kib: 10, boot_rss_kib: 11, boot_pss_kib: 12 } }, w.to_memory)
    assert entry[:booted]
    assert_equal 2, entry[:phase], "a worker marked to be replaced belongs to the phase before"
  ensure
    [master, worker].each { |c| c&.close }
  end
end
