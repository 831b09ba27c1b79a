# frozen_string_literal: true

require "test_helper"
require_relative "support/child_env"
require "json"
require "open3"
require "rbconfig"
require "tmpdir"

# Smoke test of bench/waiting.rb (issue 13): `--quick` on the sleep and rails bars with a few
# servers must run end to end — its own PostgreSQL cluster, the slow service, the Rails app on
# PostgreSQL behind a 50 ms Net::HTTP call; and issue 12's tail bar for the Rails app on SQLite
# with 2 workers, judged against Puma, with `--baseline` (this tree again as margay-base, judged
# too) — and write a JSON result whose rows served
# requests without errors, and leave no PostgreSQL behind. Never a speed figure. Skips when
# wrk, the bench bundle or PostgreSQL is missing (CI installs all three).
class WaitingBenchSmokeTest < Minitest::Test
  include ChildEnv

  ROOT = File.expand_path("../..", __dir__)
  WAITING = File.join(ROOT, "bench", "waiting.rb")

  def test_quick_waiting_bars_run_end_to_end
    skip "wrk is not installed (apt-get install wrk)" unless executable_in_path?("wrk")
    skip "the bench bundle is not installed (bundle install --gemfile bench/Gemfile)" unless bench_bundle?
    skip "PostgreSQL is not installed (apt-get install postgresql libpq-dev)" if Dir.glob("/usr/lib/postgresql/*/bin/initdb").empty?

    servers = %w[margay margay-base puma itsi]
    servers << "margay-fibers" if margay_help.include?("--fibers") # once issue 13's fiber mode is in the tree
    Dir.mktmpdir("margay-waiting-smoke-") do |dir|
      out, status = Open3.capture2e(clean_env, RbConfig.ruby, WAITING, "--quick", "--bars", "sleep,rails,tail-rails-w2",
                                    "--servers", servers.join(","), "--concurrency", "8", "--results-dir", dir,
                                    "--baseline", ROOT,
                                    chdir: ROOT, unsetenv_others: true)
      latest = File.join(dir, "waiting-latest.json")
      assert File.exist?(latest), "bench/waiting.rb wrote no waiting-latest.json (exit #{status.exitstatus}):\n#{out}"

      result = JSON.parse(File.read(latest))
      assert_equal "quick", result["mode"]
      assert_empty result["failures"], "bench/waiting.rb reported failures:\n#{out}"
      assert status.success?, "bench/waiting.rb exited #{status.exitstatus}:\n#{out}"
      assert_match(/PostgreSQL/, result.dig("versions", "postgresql").to_s, "no PostgreSQL cluster was started")
      assert_equal ROOT, result.dig("versions", "baseline_dir")

      rows = result.fetch("summary")
      %w[sleep rails tail-rails-w2].each do |bar|
        (servers & result.dig("config", "bars_detail", bar, "servers")).each do |server|
          row = rows.find { |r| r["bar"] == bar && r["server"] == server }
          refute_nil row, "no #{bar} row for #{server}:\n#{out}"
          assert_operator row["requests"], :>, 0, "#{server} served no #{bar} request:\n#{out}"
          assert_equal 0, row["errors"], "#{server} #{bar}: non-2xx/timeouts/socket errors:\n#{out}"
          assert_operator row["pss_mib"].to_f, :>, 0, "no memory sample for #{server} #{bar}"
        end
      end
      rails = rows.select { |r| r["bar"] == "rails" }
      assert rails.all? { |r| r["helpers_cpu_pct_median"] }, "PostgreSQL/slow service CPU not recorded"
      if servers.include?("margay-fibers")
        refute_empty result["verdicts"], "margay-fibers ran but no bar was judged:\n#{out}"
      end
      tail = result["verdicts"].select { |v| v["bar"] == "tail-rails-w2" }
      checks = %w[margay margay-base].flat_map do |s|
        ["c=8 #{s} p99 / puma ≤ 1.0 at ≥ 0.95x its req/s", "c=8 #{s} p99 / own mean ≤ 1.25"]
      end
      assert_equal checks, tail.map { |v| v["check"] }, "the tail bar (Rails on SQLite, 2 workers) was not judged:\n#{out}"
      assert File.exist?(File.join(dir, "waiting-latest.md")), "no Markdown report written"
      assert_empty Dir.glob(File.join(Dir.tmpdir, "margay-pg-*")).select { |d| File.mtime(d) > Time.now - 600 },
                   "the PostgreSQL temp dir was left behind"
    end
  end

  private

  def margay_help
    out, = Open3.capture2e(clean_env, RbConfig.ruby, File.join(ROOT, "exe", "margay"), "--help", chdir: ROOT,
                                                                                            unsetenv_others: true)
    out
  end
end
