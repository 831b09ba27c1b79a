# frozen_string_literal: true

require "test_helper"
require "margay/cluster/signals"

# The master's signal inbox (Margay::Cluster::Signals), without trapping
# anything in the test process: test/slow/cluster/ sends real signals.
class SignalsTest < Minitest::Test
  def setup
    @signals = Margay::Cluster::Signals.new
  end

  def test_requests_wake_the_loop_and_come_out_in_order
    refute @signals.wake.wait_readable(0)
    @signals.request("TTIN")
    @signals.request("HUP")
    assert @signals.wake.wait_readable(0), "the loop wakes"
    @signals.drain_wake
    refute @signals.wake.wait_readable(0)
    assert_equal 2, @signals.mark
    assert_equal %w[TTIN HUP], [@signals.shift, @signals.shift]
    assert_nil @signals.shift
  end

  def test_a_queued_stop_is_seen
    @signals.request("USR1")
    refute @signals.stop_queued?
    @signals.request("QUIT")
    assert @signals.stop_queued?
  end
end
