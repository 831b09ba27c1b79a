# frozen_string_literal: true

require "test_helper"
require_relative "support/child_env"

# Smoke test of bench/handshakes.rb: one short round of each server (Margay over TLS, nginx
# with ssl, Puma 8 from the bench bundle with the same ssl:// bind) makes full and resumed
# handshakes, the ticker thread is read on Margay and Puma, and a few idle connections are
# held. It never asserts a speed figure; only Margay's row must be free of socket errors (a
# peer's are reported in its row).
class HandshakesBenchSmokeTest < Minitest::Test
  include ChildEnv

  def test_one_round_of_each_server_and_a_few_idle_connections
    %w[wrk openssl nginx curl].each { |cmd| skip "#{cmd} is not installed" unless executable_in_path?(cmd) }
    out, result = run_bench("handshakes", "--rounds", "1", "--seconds", "1", "--keys", "ecdsa", "--connections", "4",
                            "--idle", "20")
    assert_equal %w[margay nginx puma], result["rows"].map { |r| r["server"] }
    result["rows"].each do |row|
      assert_operator row["full_per_s"], :>, 0, "#{row['server']} made no full handshake:\n#{out}"
      assert_operator row["resumed_per_s"], :>, 0, "#{row['server']} resumed no session:\n#{out}"
      assert_equal 0, row["full_errors"], "#{row['server']} had socket errors:\n#{out}" if row["server"] == "margay"
    end
    margay = result["rows"].first
    assert_equal "/up", margay["ticker_storm_path"], "Margay's storm goes to the engine's path"
    assert_operator margay["ticker_alone_per_s"], :>, 0, "the ticker ran:\n#{out}"
    assert_equal [20, 20], result["idle"].map { |r| r["still_open"] }, "each server held the idle connections:\n#{out}"
    assert_match(/ecdsa, vs nginx: full /, out)
  end
end
