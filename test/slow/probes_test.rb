# frozen_string_literal: true

require "test_helper"
require "json"
require "open3"
require "rbconfig"
require "tmpdir"

# bench/probes.rb, short: app threads oversubscribed 25 times by slow requests, a probe every
# 100 ms with a 1 s timeout. Margay's /readyz (health listener, answered by the engine) never
# fails, in a single process and a 2-worker cluster, while the same probe through the app does
# (the load is real). Puma runs beside it (its control app), its figures in the output only.
class ProbesBenchTest < Minitest::Test
  ROOT = File.expand_path("../..", __dir__)
  PROBES = File.join(ROOT, "bench", "probes.rb")

  def test_health_answers_under_saturation_and_the_app_probe_does_not
    skip "wrk is not installed" unless ENV.fetch("PATH", "").split(":").any? { |d| File.executable?(File.join(d, "wrk")) }
    Dir.mktmpdir("margay-probes-test-") do |dir|
      out, status = Open3.capture2e(RbConfig.ruby, PROBES, "--seconds", "4", "--results-dir", dir, chdir: ROOT)
      assert status.success?, "bench/probes.rb exited #{status.exitstatus}:\n#{out}"
      rows = JSON.parse(File.read(Dir[File.join(dir, "probes-*.json")].first))["rows"]
      assert_equal [%w[margay single], %w[puma single], %w[margay cluster], %w[puma cluster]],
                   rows.map { |r| r.values_at("server", "mode") }
      rows.select { |r| r["server"] == "margay" }.each do |row|
        assert_equal 0, row["health"]["failed"], "#{row['mode']}: #{row['health'].inspect}\n#{out}"
        assert_operator row["health"]["max_ms"], :<, 1000
        assert_operator row["app"]["failed"], :>=, row["app"]["probes"] / 2, "the app probe must fail: #{row['app'].inspect}"
      end
    end
  end
end
