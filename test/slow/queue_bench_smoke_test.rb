# frozen_string_literal: true

require "test_helper"
require_relative "support/child_env"

# Smoke test of bench/queue.rb: one short round per server (Margay and Puma 8 from the bench
# bundle, 2 workers) with each load runs end to end and writes rows with the per-worker
# figures. It never asserts a speed figure; only Margay's rows must be free of failed requests
# (Puma's are reported in its row).
class QueueBenchSmokeTest < Minitest::Test
  include ChildEnv

  def test_one_round_of_each_load_writes_both_servers_rows
    %w[ab wrk ss].each { |cmd| skip "#{cmd} is not installed" unless executable_in_path?(cmd) }
    %w[ab wrk].each do |load|
      out, result = run_bench("queue", "--load", load, "--rounds", "1", "--requests", "300", "--connections", "20",
                              "--seconds", "1", prefix: "queue-#{load}")
      assert_equal %w[margay puma], result["rows"].map { |r| r["server"] }
      result["rows"].each do |row|
        assert_operator row["rps"], :>, 0, "#{row['server']} served nothing under #{load}:\n#{out}"
        if row["server"] == "margay"
          assert_equal 0, row["failed"] + row["non_2xx"], "Margay failed requests under #{load}:\n#{out}"
        end
        assert_equal 2, row["conns_median"].size, "the per-worker connections were sampled:\n#{out}"
      end
      margay = result["rows"].find { |r| r["server"] == "margay" }
      assert_equal 2, margay["workers_queue"]&.size, "Margay's per-worker queue looks were read:\n#{out}"
      assert_match(/^round 1 margay per worker, waiting requests/, out)
      assert_match(/^margay \/ puma per round/, out)
    end
  end

  def test_the_open_loop_finds_each_servers_capacity
    skip "ss is not installed" unless executable_in_path?("ss")
    out, result = run_bench("queue", "--load", "arrival", "--rounds", "1", "--probes", "2", "--seconds", "1",
                            "--max-rate", "40", prefix: "queue-arrival")
    assert_equal %w[margay puma], result["rows"].map { |r| r["server"] }
    result["rows"].each do |row|
      assert_equal [40], row["probes"].map { |pr| pr["rate"] }, "a first probe at --max-rate that met ends the search:\n#{out}"
      assert_equal 40, row["rps"], "#{row['server']} held 40/s within 100 ms:\n#{out}"
    end
    assert_match(/^margay \/ puma per round \(capacity ratio\): 1: 1\.00x/, out)
  end
end
