# frozen_string_literal: true

require "test_helper"
require "json"
require "minitest/mock"
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
    assert_equal %i[puma margay ruby allocator], stats[:versions].keys
    assert_includes %w[malloc jemalloc], stats[:versions][:allocator]
    assert_equal "8.0.2", stats[:versions][:puma], "the Puma release Margay answers like"
    assert_equal 0, Margay::Stats.counters(SERVER.merge(busy_threads: 7), 5)[:pool_capacity], "never negative"
  end

  def test_own_counters_beside_pumas
    assert_equal({ errors: 3, abandoned: 0, busy_ms: 0, shed: 0, oldest_wait_ms: 0 },
                 Margay::Stats.own_counters(SERVER.merge(errors: 3)),
                 "a server not started yet has no abandoned count: 0")
    refute_includes Margay::Stats.single(SERVER.merge(errors: 3), 5).keys, :errors, "Puma's stats keep Puma's keys"
  end

  def test_cluster_counts_booted_and_old_workers
    workers = [{ booted: true, phase: 2 }, { booted: true, phase: 1 }, { booted: false, phase: 2 }]
    stats = Margay::Stats.cluster(workers, 2)
    assert_equal %i[started_at workers phase booted_workers old_workers worker_status versions], stats.keys
    assert_equal [3, 2, 2, 1], stats.values_at(:workers, :phase, :booted_workers, :old_workers)
  end

  def test_memory_of_this_process_is_read_at_most_every_interval
    skip "no /proc" unless File.exist?("/proc/self/status")
    now = Margay::Stats::Memory.read
    assert_operator now[:rss_kib], :>, 0
    assert_operator now[:rss_kib], :>=, now[:pss_kib]
    readings = [{ rss_kib: 100, pss_kib: 50 }, { rss_kib: 300, pss_kib: 150 }]
    Margay::Stats::Memory.stub(:read, -> { readings.shift }) do
      Margay::Stats::Memory.boot!
      first = Margay::Stats::Memory.current(100.0)
      assert_equal({ rss_kib: 100, pss_kib: 50, boot_rss_kib: 100, boot_pss_kib: 50 }, first, "the first reading is the boot value")
      assert_equal first, Margay::Stats::Memory.current(100.0 + Margay::Stats::Memory::INTERVAL - 0.1), "cached"
      assert_equal 1, readings.size, "one read so far"
      assert_equal({ rss_kib: 300, pss_kib: 150, boot_rss_kib: 100, boot_pss_kib: 50 },
                   Margay::Stats::Memory.current(100.0 + Margay::Stats::Memory::INTERVAL), "read again; the boot value stays")
    end
  ensure
    Margay::Stats::Memory.boot!
  end

  def test_memory_report_single_and_cluster
    assert_equal({ rss_kib: 1 }, Margay::Stats.memory_report(master: { rss_kib: 1 }))
    workers = [{ index: 0, pid: 10, mold: false, memory: { rss_kib: 50, pss_kib: 20 } },
               { index: 1, pid: 11, mold: true, memory: { rss_kib: 40, pss_kib: 15 } }]
    report = Margay::Stats.memory_report(master: { rss_kib: 30, pss_kib: 10 }, workers: workers)
    assert_equal [120, 45], report.values_at(:total_rss_kib, :total_pss_kib), "every process, the mold too"
    assert_equal workers, report[:workers]
  end

  def test_margay_memory_hash_asks_the_memory_source
    assert_equal %i[rss_kib pss_kib boot_rss_kib boot_pss_kib], Margay.memory_hash.keys, "this process without a source"
    Margay::Stats.memory_source = Struct.new(:memory).new({ total_pss_kib: 3 })
    assert_equal({ total_pss_kib: 3 }, Margay.memory_hash)
  ensure
    Margay::Stats.memory_source = nil
  end

  def test_margay_stats_reads_the_source
    assert_equal({}, Margay.stats_hash)
    Margay::Stats.source = Struct.new(:stats).new({ running: 1 })
    assert_equal({ running: 1 }, Margay.stats_hash)
    assert_equal '{"running":1}', Margay.stats
  end
end
