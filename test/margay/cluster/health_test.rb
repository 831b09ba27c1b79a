# frozen_string_literal: true

require "test_helper"
require "support/master_side"

# The master's checks on its workers (Margay::Cluster::Health): a silent
# worker is killed, one over worker_memory_limit is handed back to be
# replaced, and idle_timeout counts from the last activity the workers reported.
class HealthTest < Minitest::Test
  skip_on_jruby "no cluster: JRuby has no fork"
  include Margay::MasterSide
  Cluster = Margay::Cluster

  def new_health(**settings)
    Cluster::Health.new(config: Margay::Configuration.new(workers: 2, **settings), log: @log, clock: @clock)
  end

  # A worker record for a live process (sleep), last heard from at 0.0; returns [record, its side of the links].
  def worker(index, booted: true)
    add_worker(index, child("sleep", "30"), booted: booted)
  end

  # Send a heartbeat with these counters from +worker_side+ and let the master's side read it.
  def report(record, worker_side, requests:, busy:)
    status = Cluster::Channel::STATUS_KEYS.to_h { |k| [k, 0] }.merge(requests_count: requests, busy_threads: busy)
    worker_side.report(:alive, status)
    record.channel.read_reports
  end

  def killed?(record)
    deadline = Margay::Clock.now + 5
    loop do
      _, status = Process.wait2(record.pid, Process::WNOHANG)
      return status.termsig == 9 if status
      return false if Margay::Clock.now > deadline

      sleep 0.01
    end
  end

  def alive?(record)
    Process.wait2(record.pid, Process::WNOHANG).nil?
  end

  def test_idle_timeout_counts_from_the_last_activity_reported
    a, a_side = worker(0)
    b, b_side = worker(1)
    health = at(0.0) { new_health(idle_timeout: 2) }
    report(a, a_side, requests: 3, busy: 0)
    refute at(0.5) { health.idle_too_long?(@roster) }, "new activity"
    refute at(2.4) { health.idle_too_long?(@roster) }
    assert at(2.5) { health.idle_too_long?(@roster) }
    assert_match(/master: no request for 2s \(idle_timeout\): stopping/, @out.string)
    report(b, b_side, requests: 1, busy: 0)
    refute at(3.0) { health.idle_too_long?(@roster) }, "a request since"
    refute at(4.9) { health.idle_too_long?(@roster) }
    assert at(5.0) { health.idle_too_long?(@roster) }
  end

  def test_a_request_running_is_activity_however_long
    a, a_side = worker(0)
    health = at(0.0) { new_health(idle_timeout: 1) }
    report(a, a_side, requests: 0, busy: 1)
    refute at(10.0) { health.idle_too_long?(@roster) }
    refute at(20.0) { health.idle_too_long?(@roster) }
    report(a, a_side, requests: 1, busy: 0)
    refute at(21.0) { health.idle_too_long?(@roster) }
    assert at(22.0) { health.idle_too_long?(@roster) }
  end

  def test_no_idle_timeout_never_idles
    worker(0)
    health = at(0.0) { new_health }
    refute at(0.0) { health.idle_too_long?(@roster) }
    refute at(1e6) { health.idle_too_long?(@roster) }
  end

  def test_a_silent_worker_is_killed_after_its_timeout
    booting, = worker(0, booted: false)
    booted, = worker(1)
    health = new_health(worker_timeout: 10, worker_boot_timeout: 20)
    at(9.9) { health.check_heartbeats(@roster, grace: 30) }
    assert alive?(booted)
    at(10.0) { health.check_heartbeats(@roster, grace: 30) }
    assert killed?(booted), "worker_timeout for a booted worker"
    assert_equal 10.0, booted.last_beat, "one kill per timeout"
    @roster.delete(booted) # its pid is free again: no second kill
    assert alive?(booting), "worker_boot_timeout while it boots"
    at(20.0) { health.check_heartbeats(@roster, grace: 30) }
    assert killed?(booting)
    assert_match(/master: worker 1 \(pid #{booted.pid}\) silent for 10s: killing it/, @out.string)
  end

  def test_a_stopping_worker_has_its_grace_period_and_five_seconds
    stopping, = worker(0)
    stopping.stopping!(100.0)
    health = new_health(worker_timeout: 1)
    at(109.9) { health.check_heartbeats(@roster, grace: 5) }
    assert alive?(stopping), "silent for longer than worker_timeout, but stopping"
    at(110.0) { health.check_heartbeats(@roster, grace: 5) }
    assert killed?(stopping)
    assert_equal 110.0, stopping.stop_at, "one kill per grace period"
    assert_match(/still stopping after 10s: killing it/, @out.string)
  end

  def test_the_booted_serving_workers_over_the_memory_limit_are_handed_back_once_a_second
    over, = worker(0)
    worker(1, booted: false)
    worker(2).first.stopping!(0.0)
    health = new_health(worker_memory_limit: 1)
    seen = at(0.0) { [].tap { |a| health.check_memory(@roster) { |w| a << w } } }
    assert_equal [over], seen, "booting and stopping workers are left alone"
    assert_match(/master: worker 0 \(pid #{over.pid}\) RSS \d+ MiB over the limit of 0 MiB: replacing it/, @out.string)
    assert_empty(at(0.9) { [].tap { |a| health.check_memory(@roster) { |w| a << w } } })
    assert_equal [over], at(1.0) { [].tap { |a| health.check_memory(@roster) { |w| a << w } } }
  end

  def test_no_memory_limit_checks_nothing
    worker(0)
    health = new_health
    health.check_memory(@roster) { flunk "no limit" }
  end
end
