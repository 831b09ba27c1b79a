# frozen_string_literal: true

require "test_helper"
require "margay/runner"
require "margay/cluster/rate_meter"

# A worker's recent request rate for keep-alive balancing (Cluster::RateMeter): sampled at most
# every 50 ms, smoothed over about half a second; the clock and the count are the caller's.
class RateMeterTest < Minitest::Test
  def setup
    @meter = Margay::Cluster::RateMeter.new
  end

  def test_the_first_rate_needs_two_samples_50_ms_apart
    assert_nil @meter.sample(10.0) { 100 }
    assert_nil @meter.sample(10.03) { raise "not asked before 50 ms" }
    assert_in_delta 400.0, @meter.sample(10.1) { 140 }, 1e-9, "40 requests in 0.1 s"
    assert_in_delta 400.0, @meter.rate, 1e-9
  end

  def test_later_samples_move_the_rate_by_their_share_of_half_a_second
    @meter.sample(0.0) { 0 }
    @meter.sample(0.1) { 40 } # 400 per s
    assert_in_delta 400 + (0.2 * (100 - 400)), @meter.sample(0.2) { 50 }, 1e-9, "a tenth of a second at 100 per s: a fifth of the way"
    assert_in_delta 100.0, @meter.sample(1.2) { 150 }, 1e-9, "a whole second at 100 per s: all the way"
  end

  def test_a_worker_that_stops_serving_falls_to_zero
    @meter.sample(0.0) { 0 }
    @meter.sample(0.5) { 100 }
    assert_in_delta 0.0, @meter.sample(1.5) { 100 }, 1e-9
  end
end
