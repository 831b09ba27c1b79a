# frozen_string_literal: true

require "test_helper"
require "margay/cluster/back_off"

# The master's back-off after boot failures (Margay::Cluster::BackOff):
# 1, 2, 4 ... 30 s between attempts, and a booted worker ends the streak.
class BackOffTest < Minitest::Test
  skip_on_jruby "no cluster: JRuby has no fork"
  Cluster = Margay::Cluster

  def setup
    @out = StringIO.new
    @clock = Margay::TestHelper::ManualClock.new
    @back_off = Cluster::BackOff.new(log: Margay::Log.new(out: @out, err: @out), clock: @clock)
  end

  def at(now, &block)
    @clock.at(now, &block)
  end

  def test_nothing_waits_before_a_failure
    refute at(0.0) { @back_off.waiting? }
    assert_equal 0, @back_off.failures
  end

  def test_each_failure_doubles_the_delay_up_to_thirty_seconds
    delays = Array.new(7) do |i|
      now = 1000.0 * (i + 1)
      at(now) { @back_off.failed! }
      delay = (1..60).find { |s| !at(now + s) { @back_off.waiting? } }
      assert at(now + delay - 0.001) { @back_off.waiting? }, "still waiting just before the delay ends"
      delay
    end
    assert_equal [1, 2, 4, 8, 16, 30, 30], delays
    assert_equal 7, @back_off.failures
    assert_match(/worker boot failed 7 time\(s\); next attempt in 30s/, @out.string)
  end

  def test_a_booted_worker_ends_the_streak
    3.times { at(0.0) { @back_off.failed! } }
    @back_off.booted!
    assert_equal 0, @back_off.failures
    at(100.0) { @back_off.failed! }
    refute at(101.0) { @back_off.waiting? }, "1 s again after a worker booted"
    assert_match(/failed 1 time\(s\); next attempt in 1s\n\z/, @out.string)
  end
end
