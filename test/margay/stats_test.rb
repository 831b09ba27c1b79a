# frozen_string_literal: true

require "test_helper"
require "json"
require "margay/stats"

# Puma-shaped stats (Margay::Stats) from Margay's counters.
class StatsTest < Minitest::Test
  SERVER = { requests: 9, connections: 2, threads: 3, busy_threads: 2, errors: 0 }.freeze

  def teardown
    Margay::Stats.source = nil
  end

  def test_single_has_pumas_keys_and_counters
    Margay::Stats.started_at = Time.utc(2026, 11, 24, 14, 1, 2)
    stats = Margay::Stats.single(SERVER, 5)
    assert_equal({ started_at: "2026-11-24T14:01:02Z", backlog: 0, running: 3, pool_capacity: 3, busy_threads: 2,
                   io_threads: 0, backlog_max: 0, max_threads: 5, requests_count: 9, reactor_max: 2 },
                 stats.except(:versions))
    assert_equal %i[puma margay ruby], stats[:versions].keys
    assert_equal "8.0.2", stats[:versions][:puma], "the Puma release Margay answers like"
    assert_equal 0, Margay::Stats.counters(SERVER.merge(busy_threads: 7), 5)[:pool_capacity], "never negative"
  end

  def test_cluster_counts_booted_and_old_workers
    workers = [{ booted: true, phase: 2 }, { booted: true, phase: 1 }, { booted: false, phase: 2 }]
    stats = Margay::Stats.cluster(workers, 2)
    assert_equal %i[started_at workers phase booted_workers old_workers worker_status versions], stats.keys
    assert_equal [3, 2, 2, 1], stats.values_at(:workers, :phase, :booted_workers, :old_workers)
  end

  def test_margay_stats_reads_the_source
    assert_equal({}, Margay.stats_hash)
    Margay::Stats.source = Struct.new(:stats).new({ running: 1 })
    assert_equal({ running: 1 }, Margay.stats_hash)
    assert_equal '{"running":1}', Margay.stats
  end
end
