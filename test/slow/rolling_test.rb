# frozen_string_literal: true

require "test_helper"
require "json"
require "open3"
require "rbconfig"
require "tmpdir"

# Rolling restarts behind the real HAProxy and nginx with retries off (bench/rolling.rb, one
# short run each): three Margay instances in their own network namespaces, each restarted in
# turn under keep-alive load. With drain_delay the clients see no error; without it (the
# control, which shows the restarts and the load are real) HAProxy's clients see some.
class RollingRestartTest < Minitest::Test
  ROOT = File.expand_path("../..", __dir__)
  ROLLING = File.join(ROOT, "bench", "rolling.rb")
  SMALL = %w[--servers margay --workers 1 --threads 4 --connections 4].freeze

  def setup
    skip "needs root (network namespaces)" unless Process.uid.zero?
    %w[haproxy nginx wrk ip].each { |cmd| skip "#{cmd} is not installed" unless which(cmd) }
  end

  def test_term_usr2_usr1_behind_haproxy_lose_nothing_with_drain
    rows = rolling("--balancers", "haproxy", "--restarts", "term,usr2,usr1", "--drain-delay", "2")
    rows.each { |row| assert_clean(row) }
  end

  def test_term_usr2_usr1_behind_nginx_lose_nothing_with_drain
    rolling("--balancers", "nginx", "--restarts", "term,usr2,usr1", "--drain-delay", "2").each { |row| assert_clean(row) }
  end

  def test_without_drain_a_term_behind_haproxy_fails_requests
    row = rolling("--balancers", "haproxy", "--restarts", "term", "--drain-delay", "0").first
    assert_nil row["error"]
    assert_operator row["non_2xx"] + row["socket_errors"], :>, 0, "the control lost nothing: #{row.inspect}"
  end

  private

  def assert_clean(row)
    label = "#{row['balancer']} #{row['restart']}"
    assert_nil row["error"], "#{label}: #{row['error']}"
    assert_operator row["requests"], :>=, 2000, "#{label}: too little load to tell: #{row.inspect}"
    assert_equal [0, 0], [row["non_2xx"], row["socket_errors"]], "#{label}: #{row['errors'].inspect} #{row['events'].inspect}"
  end

  def rolling(*args)
    Dir.mktmpdir("margay-rolling-test-") do |dir|
      out, status = Open3.capture2e(RbConfig.ruby, ROLLING, *SMALL, *args, "--results-dir", dir, "--keep",
                                    File.join(dir, "logs"), chdir: ROOT)
      assert status.success?, "bench/rolling.rb #{args.join(' ')} exited #{status.exitstatus}:\n#{out}"
      JSON.parse(File.read(Dir[File.join(dir, "rolling-*.json")].first))["rows"]
    end
  end

  def which(cmd)
    (ENV.fetch("PATH", "").split(File::PATH_SEPARATOR) | %w[/usr/sbin /sbin]).any? { |d| File.executable?(File.join(d, cmd)) }
  end
end
