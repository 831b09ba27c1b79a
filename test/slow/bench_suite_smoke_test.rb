# frozen_string_literal: true

require "test_helper"
require_relative "support/child_env"
require "json"
require "open3"
require "rbconfig"
require "tmpdir"

# Smoke test of the comparative suite: `bench/run.rb --quick` restricted to Margay and one
# short workload must run end to end and write a JSON result with Margay rows that served
# requests. It never asserts a speed figure; it skips when wrk or the bench bundle
# (`bundle install --gemfile bench/Gemfile`) is missing.
class BenchSuiteSmokeTest < Minitest::Test
  include ChildEnv

  ROOT = File.expand_path("../..", __dir__)
  RUN = File.join(ROOT, "bench", "run.rb")

  def test_quick_suite_produces_margay_rows
    skip "wrk is not installed (apt-get install wrk)" unless executable_in_path?("wrk")
    skip "the bench bundle is not installed (bundle install --gemfile bench/Gemfile)" unless bench_bundle?

    Dir.mktmpdir("margay-suite-smoke-") do |dir|
      out, status = Open3.capture2e(clean_env, RbConfig.ruby, RUN, "--quick", "--servers", "margay",
                                    "--workloads", "hello", "--concurrency", "4,16", "--slo-workloads", "hello",
                                    "--results-dir", dir, "--no-charts", chdir: ROOT, unsetenv_others: true)
      latest = File.join(dir, "suite-latest.json")
      assert File.exist?(latest), "bench/run.rb wrote no suite-latest.json (exit #{status.exitstatus}):\n#{out}"

      result = JSON.parse(File.read(latest))
      assert_equal "quick", result["mode"]
      assert_empty result["failures"], "bench/run.rb reported failures:\n#{out}"
      assert status.success?, "bench/run.rb exited #{status.exitstatus}:\n#{out}"

      rows = result.fetch("summary").select { |r| r["server"] == "margay" && r["workload"] == "hello" }
      assert_equal [4, 16], rows.map { |r| r["concurrency"] }.sort, "missing Margay rows:\n#{out}"
      rows.each do |row|
        assert_operator row["requests"], :>, 0, "no requests served at #{row['concurrency']} connections"
        assert_operator row["pss_mib"].to_f, :>, 0, "no memory sample at #{row['concurrency']} connections"
      end
      probes = result.fetch("capacity_probes").select { |p| p["server"] == "margay" }
      refute_empty probes, "no capacity probe ran:\n#{out}"
      assert_operator probes.first["ok"], :>, 0, "the arrival-rate client got no answers"
      assert File.exist?(File.join(dir, "suite-latest.md")), "no Markdown report written"
    end
  end

  # Issue 13's waiting workload in the suite: rails-pg-slow (its own PostgreSQL cluster, the
  # slow service) under Margay and Itsi's fiber-scheduler mode, every request answered 2xx.
  def test_quick_suite_runs_the_waiting_rails_workload
    skip "wrk is not installed (apt-get install wrk)" unless executable_in_path?("wrk")
    skip "the bench bundle is not installed (bundle install --gemfile bench/Gemfile)" unless bench_bundle?
    skip "PostgreSQL is not installed (apt-get install postgresql libpq-dev)" if Dir.glob("/usr/lib/postgresql/*/bin/initdb").empty?

    Dir.mktmpdir("margay-suite-smoke-") do |dir|
      out, status = Open3.capture2e(clean_env, RbConfig.ruby, RUN, "--quick", "--servers", "margay,itsi",
                                    "--workloads", "rails-pg-slow", "--concurrency", "4", "--slo-workloads", "none",
                                    "--results-dir", dir, "--no-charts", chdir: ROOT, unsetenv_others: true)
      latest = File.join(dir, "suite-latest.json")
      assert File.exist?(latest), "bench/run.rb wrote no suite-latest.json (exit #{status.exitstatus}):\n#{out}"

      result = JSON.parse(File.read(latest))
      assert_empty result["failures"], "bench/run.rb reported failures:\n#{out}"
      %w[margay itsi].each do |server|
        row = result.fetch("summary").find { |r| r["server"] == server && r["workload"] == "rails-pg-slow" }
        refute_nil row, "no rails-pg-slow row for #{server}:\n#{out}"
        assert_operator row["requests"], :>, 0, "#{server} served no request:\n#{out}"
        assert_equal 0, row["non2xx"] + row["timeouts"] + row["socket_errors"], "#{server} had errors:\n#{out}"
      end
      assert_match(/PostgreSQL/, result.dig("versions", "postgresql").to_s)
    end
  end
end
