# frozen_string_literal: true

require_relative "control_process"
require_relative "../../support/promtool"

# Margay.metrics of a real process (serve.rb writes the launcher process's
# text to a file), single mode and a 2-worker cluster's master, beside the
# real yabeda-puma-plugin in the same process: its puma_* names, types and
# index labels are Margay's; the text parses with promtool; a worker's
# errors arrive in the master with its status, a killed worker counts as a
# restart of its slot.
class SlowMetricsTest < Minitest::Test
  include ControlProcess
  include Margay::Promtool

  def test_single_mode_metrics_beside_yabeda
    start_margay(plugins: ["yabeda"], max_threads: 6, env: { "MARGAY_CTL_YABEDA" => "1", "MARGAY_CTL_METRICS" => file })
    3.times { get }
    get("/fail")
    text = eventually("the requests in the metrics") { metrics if metrics[/^puma_requests_count\{index="0"\} (\d+)$/, 1].to_i >= 4 }
    assert_equal KNOWN_LINT, assert_promtool_accepts(text)
    assert_same_as_yabeda(text, [0])
    assert_includes text.lines, %(margay_request_errors_total{index="0"} 1\n)
    assert_match(/^margay_memory_pss_bytes\{role="worker",index="0"\} [1-9]\d+$/, text)
    assert_match(/^margay_start_time_seconds \d{10}$/, text)
    refute_includes text, "puma_workers", "single mode has no worker metrics"
  end

  def test_cluster_master_metrics_beside_yabeda
    start_margay(plugins: ["yabeda"], workers: 2, max_threads: 6, control_token: "s3",
                 env: { "MARGAY_CTL_YABEDA" => "1", "MARGAY_CTL_METRICS" => file })
    10.times { get }
    2.times { get("/fail") }
    text = eventually("every worker's status and errors in the master's metrics") do
      t = metrics
      t if t.scan(/^puma_requests_count\{index="[01]"\} (\d+)$/).flatten.map(&:to_i).sum >= 12 &&
           t.scan(/^margay_request_errors_total\{index="[01]"\} (\d+)$/).flatten.map(&:to_i).sum == 2
    end
    assert_equal KNOWN_LINT, assert_promtool_accepts(text)
    assert_same_as_yabeda(text, [0, 1])
    %w[puma_workers puma_booted_workers].each { |name| assert_includes text.lines, "#{name} 2\n" }
    assert_includes text.lines, "puma_old_workers 0\n"
    assert_match(/^margay_memory_pss_bytes\{role="master"\} [1-9]\d+$/, text)
    assert_match(/^margay_listen_queue \d+$/, text, "the master reads its TCP listener's accept queue")
    [0, 1].each do |i|
      assert_match(/^margay_memory_pss_bytes\{role="worker",index="#{i}"\} [1-9]\d+$/, text)
      assert_includes text.lines, %(margay_worker_restarts_total{index="#{i}"} 0\n)
      assert_includes text.lines, %(margay_worker_booted{index="#{i}"} 1\n)
      assert_match(/^margay_busy_thread_seconds_total\{index="#{i}"\} \d/, text, "with the worker's status")
      assert_match(/^margay_requests_shed_total\{index="#{i}"\} 0$/, text)
    end
    # each worker's histograms travel with its heartbeat: every request the workers counted
    counted = %w[margay_queue_time_seconds http_server_request_duration_seconds].map do |name|
      text.scan(/^#{name}_count\{index="[01]"\} (\d+)$/).flatten.map(&:to_i).sum
    end
    requests = text.scan(/^puma_requests_count\{index="[01]"\} (\d+)$/).flatten.map(&:to_i).sum
    assert_operator counted[0], :>=, 12, "queue times of the 12 requests"
    assert_operator counted[1], :>=, 12, "durations of the 12 requests"
    assert_operator counted.max, :<=, requests
    assert_match(/^margay_queue_time_seconds_bucket\{index="0",le="\+Inf"\} \d+$/, text)

    victim = pumactl_json("-S", @state, "stats")["worker_status"].find { |w| w["index"] == 1 }["pid"]
    Process.kill(:KILL, victim)
    text = eventually("the slot's restart counted and the new worker booted") do
      t = metrics
      t if t.include?(%(margay_worker_restarts_total{index="1"} 1\n)) && t.include?("puma_booted_workers 2\n")
    end
    assert_includes text.lines, %(margay_worker_restarts_total{index="0"} 0\n)
  end

  private

  def file
    @file ||= File.join(@dir, "metrics.prom")
  end

  def metrics
    File.exist?(file) ? File.read(file) : ""
  end

  # yabeda-puma-plugin's puma_* metrics (collected in a worker from the
  # control app's stats) have the same names, type (gauge) and label sets
  # as Margay's: index per process, none for the cluster's.
  def assert_same_as_yabeda(text, indexes)
    types = JSON.parse(get("/yabeda-types"))
    values = JSON.parse(get("/yabeda"))
    refute_empty types
    types.each do |name, type|
      assert_equal "Yabeda::Gauge", type, name
      assert_includes text, "# TYPE #{name} gauge\n"
      ours = text.scan(/^#{name}(?:\{index="(\d+)"\})? /).flatten.map { |i| i&.to_i }
      theirs = values.fetch(name).map(&:first)
      assert_equal theirs.sort_by(&:to_i), ours.sort_by(&:to_i), "#{name}: the same series"
    end
    assert_equal indexes, values.fetch("puma_running").map(&:first).sort
  end
end
