# frozen_string_literal: true

require "test_helper"
require_relative "support/child_env"
require "json"
require "open3"
require "rbconfig"
require "tmpdir"

# Smoke test of the benchmark harness: `bench/core.rb --quick --servers margay` must run
# end to end and write a JSON result with Margay rows. It never asserts a speed figure
# (absolute numbers depend on the machine); it skips when wrk is not installed.
class BenchSmokeTest < Minitest::Test
  include ChildEnv

  ROOT = File.expand_path("../..", __dir__)
  CORE = File.join(ROOT, "bench", "core.rb")

  def test_quick_core_benchmark_produces_margay_rows
    skip "wrk is not installed (apt-get install wrk)" unless executable_in_path?("wrk")

    Dir.mktmpdir("margay-bench-smoke-") do |dir|
      out, status = Open3.capture2e(RbConfig.ruby, CORE, "--quick", "--servers", "margay",
                                    "--connections", "16,64", "--results-dir", dir, chdir: ROOT)
      latest = File.join(dir, "core-latest.json")
      assert File.exist?(latest), "bench/core.rb wrote no core-latest.json (exit #{status.exitstatus}):\n#{out}"

      result = JSON.parse(File.read(latest))
      assert_equal "quick", result["mode"]
      assert_empty result["failures"], "bench/core.rb reported failures:\n#{out}"
      assert status.success?, "bench/core.rb exited #{status.exitstatus}:\n#{out}"

      hello = result.fetch("hello").fetch("summary").select { |r| r["server"] == "margay" }
      refute_empty hello, "no Margay row in the hello results:\n#{out}"
      hello.each { |row| assert_operator row["requests"], :>, 0, "no requests served at #{row['connections']} connections" }

      slow = result.fetch("slow").fetch("summary").find { |r| r["server"] == "margay" }
      refute_nil slow, "no Margay row in the slow-client results:\n#{out}"
      assert_operator slow["requests"], :>, 0

      assert File.exist?(File.join(dir, "core-latest.md")), "no Markdown summary written"
    end
  end

  # --baseline with this very checkout as the baseline: margay-base runs in the rotation and
  # the report gets its ratio row (the plumbing only; the figures are noise).
  def test_baseline_runs_margay_base_in_the_rotation
    skip "wrk is not installed (apt-get install wrk)" unless executable_in_path?("wrk")

    Dir.mktmpdir("margay-bench-smoke-") do |dir|
      out, status = Open3.capture2e(RbConfig.ruby, CORE, "--quick", "--servers", "margay,margay-base",
                                    "--scenarios", "hello", "--connections", "16", "--duration", "1", "--warmup", "0",
                                    "--baseline", ROOT, "--results-dir", dir, chdir: ROOT)
      assert status.success?, "bench/core.rb --baseline exited #{status.exitstatus}:\n#{out}"
      result = JSON.parse(File.read(File.join(dir, "core-latest.json")))
      assert_equal %w[margay margay-base], result.dig("hello", "summary").map { |r| r["server"] }
      assert_equal ROOT, result.dig("baseline", "dir")
      ratio = result.dig("baseline", "ratios").first
      assert_equal "hello, 16 connections", ratio["scenario"]
      assert_operator ratio["rps"], :>, 0
      assert_includes File.read(File.join(dir, "core-latest.md")), "### Margay vs margay-base"
    end
  end

  # Iodine (the bench bundle's) and the 2-worker rows run in the rotation; each row gets its
  # ratio to its peer (margay-w2's "vs nginx" is to nginx-w2), and the fast-path bars are listed.
  def test_iodine_and_the_two_worker_rows_run_in_the_rotation
    skip "wrk is not installed (apt-get install wrk)" unless executable_in_path?("wrk")
    skip "nginx is not installed" unless executable_in_path?("nginx") || File.executable?("/usr/sbin/nginx")
    skip "the bench bundle is not installed" unless bench_bundle?

    Dir.mktmpdir("margay-bench-smoke-") do |dir|
      out, status = Open3.capture2e(RbConfig.ruby, CORE, "--quick", "--servers", "margay,iodine,margay-w2,nginx-w2",
                                    "--scenarios", "hello", "--connections", "16", "--duration", "1", "--warmup", "0",
                                    "--results-dir", dir, chdir: ROOT)
      assert status.success?, "bench/core.rb exited #{status.exitstatus}:\n#{out}"
      result = JSON.parse(File.read(File.join(dir, "core-latest.json")))
      rows = result.dig("hello", "summary").to_h { |r| [r["server"], r] }
      assert_equal %w[iodine margay margay-w2 nginx-w2], rows.keys.sort
      rows.each_value { |r| assert_operator r["requests"], :>, 0, "#{r['server']} served nothing" }
      assert_in_delta 1.0, rows["iodine"]["rps_vs_iodine"], 0.001
      assert_operator rows["margay-w2"]["rps_vs_nginx"], :>, 0
      assert(result["bars"].any? { |b| b["bar"].include?("Iodine") })
      assert_includes File.read(File.join(dir, "core-latest.md")), "vs Iodine"
    end
  end
end
