# frozen_string_literal: true

require "test_helper"
require "margay/metrics"
require_relative "../support/promtool"

# Prometheus metrics of a real server (Metrics.snapshot on a Server): after
# requests over real sockets the text parses and its figures are the server's.
class WireMetricsTest < Minitest::Test
  include Margay::TestHelper
  include Margay::Promtool

  APP = lambda do |env|
    raise "boom" if env["PATH_INFO"] == "/fail"

    sleep 0.3 if env["PATH_INFO"] == "/slow"

    [200, { "content-type" => "text/plain" }, ["ok"]]
  end

  def test_snapshot_of_a_serving_server
    skip_on_jruby "no TCP_INFO on JRuby: a listener's accept queue is not read there"
    with_server(APP, max_threads: 4) do |_host, port, server|
      assert_empty Margay::Metrics.snapshot(server).lines.grep(/\Apuma_requests_count\{index="0"\} [1-9]/)
      2.times { assert_match(%r{\AHTTP/1.1 200}, raw_get(port, "/")) }
      assert_match(%r{\AHTTP/1.1 200}, raw_get(port, "/slow"))
      assert_match(%r{\AHTTP/1.1 500}, raw_get(port, "/fail"))
      text = Margay::Metrics.snapshot(server)
      assert_includes text.lines, %(puma_requests_count{index="0"} 4\n)
      assert_includes text.lines, %(puma_max_threads{index="0"} 4\n)
      assert_includes text.lines, %(margay_request_errors_total{index="0"} 1\n)
      assert_includes text.lines, %(margay_requests_abandoned_total{index="0"} 0\n)
      assert_includes text.lines, "margay_listen_queue 0\n", "its TCP listener's accept queue, empty"
      busy = Float(text[/^margay_busy_thread_seconds_total\{index="0"\} (\S+)$/, 1])
      assert_operator busy, :>=, 0.1, "a thread busy 0.3 s (sampled each 5 ms tick)"
      running = text[/^puma_running\{index="0"\} (\d+)$/, 1].to_i
      assert_operator running, :>=, 1
      assert_match(/^margay_memory_rss_bytes\{role="worker",index="0"\} [1-9]\d{5,}$/, text, "this process's RSS")
      assert_equal Margay::Promtool::KNOWN_LINT, assert_promtool_accepts(text) # last: it skips without promtool
    end
  end
end
