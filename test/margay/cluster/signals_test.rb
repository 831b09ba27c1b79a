# frozen_string_literal: true

require "test_helper"
require "margay/cluster/signals"

# The master's signal inbox (Margay::Cluster::Signals), without trapping
# anything in the test process: test/slow/cluster/ sends real signals.
class SignalsTest < Minitest::Test
  skip_on_jruby "no cluster: JRuby has no fork"
  def setup
    @signals = Margay::Cluster::Signals.new
  end

  def test_requests_wake_the_loop_and_come_out_in_order
    assert_equal :wait_readable, @signals.wake.read_nonblock(1, exception: false)
    @signals.request("TTIN")
    @signals.request("HUP")
    assert_equal "..", @signals.drain_wake, "the loop wakes (a byte per request), and the pipe is emptied"
    # (read, not wait_readable(0): on Ruby 3.1 that returned nil now and then with bytes in the pipe)
    assert_equal :wait_readable, @signals.wake.read_nonblock(1, exception: false)
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
