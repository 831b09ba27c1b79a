# frozen_string_literal: true

require "test_helper"
require_relative "support/child_env"

# Smoke test of bench/queue.rb: one short round per server (Margay and Puma 8 from the bench
# bundle, 2 workers) with each load runs end to end and writes rows with the per-worker
# figures. It never asserts a speed figure.
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
        assert_equal 0, row["failed"] + row["non_2xx"], "#{row['server']} failed requests under #{load}:\n#{out}"
        assert_equal 2, row["conns_median"].size, "the per-worker connections were sampled:\n#{out}"
      end
      assert_match(/^margay \/ puma per round/, out)
    end
  end
end
