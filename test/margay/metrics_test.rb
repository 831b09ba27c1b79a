# frozen_string_literal: true

require "test_helper"
require "margay/metrics"
require_relative "../support/promtool"

# Prometheus metrics (Margay::Metrics) from single-mode and cluster-shaped
# stats: yabeda-puma-plugin's names and types, Margay's own figures, what a
# missing key renders (nothing), and the publisher's pace.
class MetricsTest < Minitest::Test
  include Margay::Promtool

  HISTOGRAM = { buckets: { 0.005 => 2, 0.05 => 5, 0.5 => 6, Float::INFINITY => 7 }, sum: 1.25, count: 7 }.freeze
  SERVER = { requests: 9, connections: 2, threads: 3, busy_threads: 2, errors: 1, abandoned: 4 }.freeze
  # yabeda-puma-plugin's gauges (lib/puma/plugin/yabeda.rb): per process with an index
  # label ("0" in single mode, its Statistics::Parser), and the cluster's without labels.
  YABEDA_PROCESS = %w[puma_backlog puma_running puma_busy_threads puma_pool_capacity puma_max_threads
                      puma_requests_count].freeze
  YABEDA_CLUSTER = %w[puma_workers puma_booted_workers puma_old_workers].freeze

  def teardown
    Margay::Stats.source = nil
  end

  def test_single_mode_names_types_and_values
    skip_on_jruby "promtool's lint is read through Open3, which comes back empty on JRuby"
    Margay::Stats.started_at = Time.utc(2026, 11, 24, 14, 1, 2)
    stats = Margay::Stats.single(SERVER, 5).merge(errors: 1, abandoned: 4, busy_ms: 2500, shed: 3, listen_queue: 6, oldest_wait_ms: 125,
                                                  queue_time_seconds: HISTOGRAM, request_duration_seconds: HISTOGRAM)
    text = Margay::Metrics.render(stats, memory: { rss_kib: 2000, pss_kib: 1500, boot_rss_kib: 1, boot_pss_kib: 1 })
    types = types(text)
    YABEDA_PROCESS.each { |name| assert_equal "gauge", types[name], name }
    assert_equal({ "puma_backlog" => 0, "puma_running" => 3, "puma_busy_threads" => 2, "puma_pool_capacity" => 3,
                   "puma_max_threads" => 5, "puma_requests_count" => 9 },
                 YABEDA_PROCESS.to_h { |name| [name, samples(text).fetch(%(#{name}{index="0"}))] })
    assert_equal Time.utc(2026, 11, 24, 14, 1, 2).to_i, samples(text)["margay_start_time_seconds"]
    expected = { %(margay_connections{index="0"}) => 2, "margay_listen_queue" => 6,
                 %(margay_request_errors_total{index="0"}) => 1, %(margay_requests_abandoned_total{index="0"}) => 4,
                 %(margay_requests_shed_total{index="0"}) => 3, %(margay_utilization_ratio{index="0"}) => 0.4,
                 %(margay_busy_thread_seconds_total{index="0"}) => 2.5, %(margay_oldest_wait_seconds{index="0"}) => 0.125,
                 %(margay_memory_rss_bytes{role="worker",index="0"}) => 2_048_000,
                 %(margay_memory_pss_bytes{role="worker",index="0"}) => 1_536_000 }
    assert_equal expected, samples(text).slice(*expected.keys)
    %w[margay_queue_time_seconds http_server_request_duration_seconds].each do |name|
      assert_equal "histogram", types[name]
      assert_equal [2, 5, 6, 7, 1.25, 7],
                   [%(#{name}_bucket{index="0",le="0.005"}), %(#{name}_bucket{index="0",le="0.05"}),
                    %(#{name}_bucket{index="0",le="0.5"}), %(#{name}_bucket{index="0",le="+Inf"}),
                    %(#{name}_sum{index="0"}), %(#{name}_count{index="0"})].map { |k| samples(text).fetch(k) }
    end
    %w[margay_request_errors_total margay_requests_abandoned_total margay_requests_shed_total
       margay_busy_thread_seconds_total].each do |name|
      assert_equal "counter", types[name]
    end
    refute_match(/\bpid=/, text, "no pid label: prometheus-client reserves it")
    assert_equal Margay::Promtool::KNOWN_LINT, assert_promtool_accepts(text)
  end

  def test_what_is_not_there_renders_nothing
    text = Margay::Metrics.render(Margay::Stats.single(SERVER, 5).merge(started_at: nil))
    YABEDA_PROCESS.each { |name| assert_includes text, "# TYPE #{name} gauge" }
    %w[margay_queue_time_seconds http_server_request_duration_seconds margay_listen_queue margay_requests_shed_total
       margay_memory_rss_bytes margay_start_time_seconds].each { |name| refute_includes text, name }
    broken = Margay::Stats.single(SERVER, 5).merge(started_at: nil, queue_time_seconds: { buckets: nil }, listen_queue: "7")
    assert_equal text, Margay::Metrics.render(broken), "a value of the wrong shape is left out"
    assert_equal "", Margay::Metrics.render({})
    assert_promtool_accepts(text)
  end

  def test_cluster_shape_index_per_worker_and_cluster_gauges
    skip_on_jruby "promtool's lint is read through Open3, which comes back empty on JRuby"
    Margay::Stats.started_at = Time.utc(2026, 11, 24, 14, 1, 2)
    status = Margay::Stats.counters(SERVER, 5).merge(errors: 2, abandoned: 0, queue_time_seconds: HISTOGRAM)
    workers = [
      { started_at: "2026-11-24T14:01:05Z", pid: 101, index: 0, phase: 1, booted: true, last_checkin: "x",
        last_status: status },
      { started_at: "2026-11-24T14:02:00Z", pid: 102, index: 1, phase: 0, booted: true, last_checkin: "x",
        last_status: status.merge(busy_threads: 5, pool_capacity: 0) },
      { started_at: "2026-11-24T14:03:00Z", pid: 103, index: 2, phase: 1, booted: false, last_checkin: "x",
        last_status: {} }
    ]
    stats = Margay::Stats.cluster(workers, 1).merge(worker_restarts: { 0 => 0, 1 => 3, 2 => 1 }, listen_queue: 11)
    memory = Margay::Stats.memory_report(master: { rss_kib: 100, pss_kib: 50 }, workers: [
                                           { index: 0, pid: 101, mold: false, memory: { rss_kib: 200, pss_kib: 80 } },
                                           { index: 1, pid: 102, mold: false, memory: { rss_kib: 0, pss_kib: 0 } },
                                           { index: 3, pid: 104, mold: true, memory: { rss_kib: 300, pss_kib: 90 } }
                                         ])
    text = Margay::Metrics.render(stats, memory: memory)
    s = samples(text)
    types = types(text)
    YABEDA_CLUSTER.each { |name| assert_equal "gauge", types[name], name }
    assert_equal [3, 2, 1], YABEDA_CLUSTER.map { |name| s.fetch(name) }, "no labels, as yabeda's"
    assert_equal [3, 3], [s[%(puma_running{index="0"})], s[%(puma_running{index="1"})]]
    assert_equal [0, 0.4, 1.0], [s[%(puma_pool_capacity{index="1"})], s[%(margay_utilization_ratio{index="0"})],
                                 s[%(margay_utilization_ratio{index="1"})]]
    refute s.key?(%(puma_running{index="2"})), "a worker that has not reported has no status samples"
    assert_equal [1, 1, 0], (0..2).map { |i| s[%(margay_worker_booted{index="#{i}"})] }
    assert_equal [0, 3, 1], (0..2).map { |i| s[%(margay_worker_restarts_total{index="#{i}"})] }
    assert_equal 1, s["margay_phased_restarts_total"]
    assert_equal 11, s["margay_listen_queue"], "the listeners', once: no index"
    assert_equal Time.utc(2026, 11, 24, 14, 2).to_i, s[%(margay_worker_start_time_seconds{index="1"})]
    assert_equal 7, s[%(margay_queue_time_seconds_count{index="1"})]
    assert_equal 2, s[%(margay_request_errors_total{index="0"})]
    assert_equal({ %(margay_memory_rss_bytes{role="master"}) => 102_400, %(margay_memory_pss_bytes{role="master"}) => 51_200,
                   %(margay_memory_rss_bytes{role="worker",index="0"}) => 204_800,
                   %(margay_memory_pss_bytes{role="worker",index="0"}) => 81_920,
                   %(margay_memory_rss_bytes{role="mold",index="3"}) => 307_200,
                   %(margay_memory_pss_bytes{role="mold",index="3"}) => 92_160 },
                 s.select { |k, _| k.start_with?("margay_memory_") }, "a worker without a reading has no sample")
    assert_equal Margay::Promtool::KNOWN_LINT, assert_promtool_accepts(text)
  end

  def test_margay_metrics_asks_the_source
    assert_equal "", Margay.metrics, "not serving"
    Margay::Stats.source = Struct.new(:metrics).new("x 1\n")
    assert_equal "x 1\n", Margay.metrics
    server = Struct.new(:stats, :config, :listeners).new(SERVER, Struct.new(:max_threads).new(7), [])
    Margay::Stats.source = Margay::Stats::WorkerSource.new(server, 7)
    assert_includes Margay.metrics.lines, %(puma_max_threads{index="0"} 7\n), "a cluster worker: its own server's"
    assert_includes Margay.metrics.lines, %(margay_requests_abandoned_total{index="0"} 4\n)
  end

  def test_publisher_renders_at_most_once_an_interval
    clock = Struct.new(:now).new(100.0)
    runner = Struct.new(:config, :renders, :listeners) do
      def stats
        self.renders += 1
        SERVER
      end
    end.new(Struct.new(:max_threads).new(5), 0, [])
    published = []
    publisher = Margay::Metrics::Publisher.new(runner, interval: 1.0, clock: clock) { |text| published << text }
    assert_includes publisher.tick, %(puma_requests_count{index="0"} 9), "the first tick publishes at once"
    clock.now = 100.9
    assert_nil publisher.tick
    clock.now = 101.0
    refute_nil publisher.tick
    assert_equal [2, 2], [published.size, runner.renders]
    assert_raises(ArgumentError) { Margay::Metrics::Publisher.new(runner) }
  end

  private

  # { "name{labels}" => value } of every sample line (the labels as written).
  def samples(text)
    text.lines.grep_v(/\A#/).to_h do |line|
      key, value = line.chomp.split(/ (?=[^ ]+\z)/)
      [key, value.include?(".") || value.include?("Inf") ? Float(value.sub("Inf", "Infinity")) : Integer(value)]
    end
  end

  def types(text)
    text.scan(/^# TYPE (\S+) (\S+)$/).to_h
  end
end
