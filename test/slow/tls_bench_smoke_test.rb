# frozen_string_literal: true

require "test_helper"
require_relative "support/child_env"

# Smoke test of bench/tls.rb: one short round of each server (Margay over TLS, Puma 8 from the
# bench bundle with the same ssl:// bind, nginx with ssl, Margay's plain HTTP) runs end to end
# over HTTPS and writes its rows, and so does a baseline checkout. It never asserts a speed figure;
# only Margay's rows must be free of socket errors (a peer's are reported in its row).
class TLSBenchSmokeTest < Minitest::Test
  include ChildEnv

  def test_one_round_of_each_server_over_https
    %w[wrk openssl nginx].each { |cmd| skip "#{cmd} is not installed" unless executable_in_path?(cmd) }
    out, result = run_bench("tls", "--rounds", "1", "--seconds", "1", "--keys", "ecdsa", "--connections", "8")
    assert_equal %w[margay puma nginx margay-plain], result["rows"].map { |r| r["server"] }
    result["rows"].each do |row|
      assert_operator row["rps"], :>, 0, "#{row['server']} served nothing:\n#{out}"
      next unless row["server"].start_with?("margay")

      assert_equal 0, row["errors"], "#{row['server']} had socket errors:\n#{out}"
    end
    assert_match(/ecdsa, vs puma: /, out)
  end

  # --baseline: another checkout (here this one) runs as margay-base and margay-base-plain.
  def test_a_baseline_checkout_in_the_rotation
    %w[wrk openssl].each { |cmd| skip "#{cmd} is not installed" unless executable_in_path?(cmd) }
    root = File.dirname(BENCH_GEMFILE, 2)
    out, result = run_bench("tls", "--rounds", "1", "--seconds", "1", "--keys", "ecdsa", "--connections", "8",
                            "--servers", "margay,margay-plain", "--baseline", root)
    assert_equal %w[margay margay-base margay-plain margay-base-plain], result["rows"].map { |r| r["server"] }
    assert result["rows"].all? { |row| row["rps"].positive? }, out
    assert_match(/ecdsa, vs margay-base: /, out)
    assert_match(/plain HTTP, margay-plain vs margay-base-plain: /, out)
  end
end
