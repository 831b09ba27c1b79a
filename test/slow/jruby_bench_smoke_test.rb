# frozen_string_literal: true

require "test_helper"
require_relative "support/child_env"

# Smoke test of bench/jruby.rb: one short round of each app with each server (Margay and
# Puma 8 on JRuby through .ci/jruby, Margay on MRI) runs end to end and writes their rows
# and the ratio lines; --curve gives one row per window. It never asserts a speed figure, and
# only Margay's rows must be free of failed requests: a peer's are reported in its row.
class JrubyBenchSmokeTest < Minitest::Test
  include ChildEnv

  def test_one_round_writes_every_servers_rows_and_the_ratios
    %w[wrk java].each { |cmd| skip "#{cmd} is not installed" unless executable_in_path?(cmd) }
    out, result = run_bench("jruby", "--rounds", "1", "--seconds", "1", "--warmup", "1", "--connections", "4",
                            "--threads", "2")
    assert_equal %w[hello io].product(%w[margay-jruby puma-jruby margay-mri]),
                 result["rows"].map { |r| [r["app"], r["server"]] }
    result["rows"].each do |row|
      assert_operator row["rps"], :>, 0, "#{row['server']} served nothing on #{row['app']}:\n#{out}"
      next unless row["server"].start_with?("margay")

      assert_equal 0, row["failed"], "#{row['server']} failed requests on #{row['app']} " \
                                     "(#{row['errors'].inspect}):\n#{out}"
    end
    %w[hello io].product(%w[puma-jruby margay-mri]).each do |app, other|
      assert_match(%r{^#{app}: margay-jruby / #{other}: req/s [\d.]+x}, out)
    end
    assert_match(/\d+\.\d+\.\d+/, result["versions"]["jruby"])
  end

  def test_the_curve_gives_every_window_and_the_steady_line
    %w[wrk java].each { |cmd| skip "#{cmd} is not installed" unless executable_in_path?(cmd) }
    out, result = run_bench("jruby", "--curve", "3", "--seconds", "1", "--rounds", "1", "--apps", "hello",
                            "--servers", "margay-jruby", "--connections", "4", "--threads", "2", prefix: "jruby-curve")
    assert_equal [1, 2, 3], result["rows"].map { |r| r["window"] }
    assert(result["rows"].all? { |r| r["server"] == "margay-jruby" && r["rps"].positive? && r["failed"].zero? }, out)
    assert_match(/^round 1 hello margay-jruby: steady [\d.]+ req\/s .* from window \d+/, out)
  end
end
