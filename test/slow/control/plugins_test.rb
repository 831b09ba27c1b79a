# frozen_string_literal: true

require_relative "control_process"

# Real Puma plugins under Margay: yabeda-puma-plugin (its metrics come from
# Margay's control app, single and cluster), solid_queue's plugin (Rails 8:
# forks its supervisor once booted, stops it at the stop), the puma gem's
# tmp_restart and Margay's own (without the puma gem).
class SlowPluginsTest < Minitest::Test
  include ControlProcess

  # Yabeda's puma_* gauges as collected in the process answering: {name => {index => value}}.
  def yabeda
    JSON.parse(get("/yabeda")).transform_values(&:to_h)
  end

  # What a deploy does, with an mtime surely newer than the one the plugin saw.
  def touch_restart_txt
    later = Time.now + 60
    File.utime(later, later, File.join(@dir, "tmp/restart.txt"))
  end

  def test_yabeda_metrics_are_margays_stats_in_single_mode
    start_margay(plugins: ["yabeda"], max_threads: 6, env: { "MARGAY_CTL_YABEDA" => "1" })
    3.times { get }
    metrics = yabeda
    assert_equal({ 0 => 6 }, metrics["puma_max_threads"])
    assert_equal({ 0 => 4 }, metrics["puma_requests_count"], "three requests and the one asking")
    assert_equal({ 0 => 1 }, metrics["puma_busy_threads"], "the one asking")
    assert_equal({ 0 => 5 }, metrics["puma_pool_capacity"])
    refute metrics.key?("puma_workers"), "single mode has no worker metrics"
    # the pool's running threads, as pumactl's stats say: the pool may grow between two looks, so
    # the two are read until they agree
    eventually("puma_running as pumactl's running") do
      yabeda["puma_running"][0] == pumactl_json("-S", @state, "stats")["running"]
    end
  end

  def test_yabeda_metrics_are_margays_stats_in_cluster_mode
    start_margay(plugins: ["yabeda"], workers: 2, max_threads: 6, control_token: "s3", env: { "MARGAY_CTL_YABEDA" => "1" })
    10.times { get }
    metrics = eventually("every worker's status in the metrics") do
      m = yabeda
      m if m["puma_requests_count"].size == 2 && m["puma_requests_count"].values.sum >= 10
    end
    assert_equal({ nil => 2 }, metrics["puma_workers"], "cluster metrics have no index")
    assert_equal({ nil => 2 }, metrics["puma_booted_workers"])
    assert_equal({ nil => 0 }, metrics["puma_old_workers"])
    assert_equal({ 0 => 6, 1 => 6 }, metrics["puma_max_threads"])
    indexes = pumactl_json("-S", @state, "stats")["worker_status"].map { |w| w["index"] }.sort
    assert_equal [0, 1], indexes
  end

  def test_the_puma_gems_own_puma_stats_answers_margays
    start_margay(workers: 1, env: { "MARGAY_CTL_REQUIRE_PUMA" => "1" })
    2.times { get }
    stats = JSON.parse(get("/puma-stats"))
    assert_equal SINGLE_KEYS, stats.keys, "in a worker: the worker's own counters"
    assert_equal 3, stats["requests_count"]
    assert_equal Margay::VERSION, stats.dig("versions", "margay")
  end

  def test_solid_queue_plugin_forks_its_supervisor_once_booted_and_stops_it
    sq = File.join(@dir, "sq")
    FileUtils.mkdir_p(sq)
    start_margay(plugins: ["solid_queue"], workers: 1, env: { "MARGAY_CTL_SOLID_QUEUE" => sq })
    started = eventually("the supervisor started") { File.exist?(File.join(sq, "started")) && File.read(File.join(sq, "started")) }
    sq_pid, mode = started.split
    assert_equal "fork", mode
    refute_equal @pid, sq_pid.to_i
    assert_equal 200, Net::HTTP.get_response(URI("http://127.0.0.1:#{@port}/")).code.to_i
    Process.kill(:TERM, @pid)
    assert_equal 0, wait_exit
    assert_equal sq_pid, File.read(File.join(sq, "stopped")), "after_stopped stopped it"
    assert_includes log_text, "Stopping Solid Queue..."
    refute_match(/WARN|ERROR/, log_text)
  end

  def test_puma_gems_tmp_restart_restarts_the_cluster
    FileUtils.mkdir_p(File.join(@dir, "tmp"))
    start_margay(plugins: ["tmp_restart"], workers: 1)
    assert File.exist?(File.join(@dir, "tmp/restart.txt")), "the plugin made the file it watches"
    touch_restart_txt
    wait_for_log(/Starting control server/, count: 2)
    wait_for_log(/booted/, count: 2)
    assert_equal @pid, state["pid"]
  end

  def test_tmp_restart_in_single_mode
    skip "single-mode restart in place (USR2) is not in this tree yet" unless Margay::Launcher.method_defined?(:restart)

    FileUtils.mkdir_p(File.join(@dir, "tmp"))
    start_margay(gemfile: MAIN_GEMFILE, plugins: ["tmp_restart"])
    touch_restart_txt
    wait_for_log(/Starting control server/, count: 2)
    assert_equal "pid #{@pid}", get
  end

  def test_margays_tmp_restart_without_the_puma_gem
    FileUtils.mkdir_p(File.join(@dir, "tmp"))
    start_margay(gemfile: MAIN_GEMFILE, plugins: %w[tmp_restart statsd], workers: 1)
    assert_equal 1, log_text.scan(/WARN/).size, log_text
    assert_match(/WARN: plugin statsd not loaded: Unable to find plugin: statsd/, log_text)
    touch_restart_txt
    wait_for_log(/Starting control server/, count: 2)
    wait_for_log(/booted/, count: 2)
    assert_equal 200, Net::HTTP.get_response(URI("http://127.0.0.1:#{@port}/")).code.to_i
  end
end
