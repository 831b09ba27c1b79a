# frozen_string_literal: true

require "time"
require_relative "clock"
require_relative "stats"
require_relative "cluster/queue_report"
require_relative "metrics/exposition"

module Margay
  # Prometheus metrics (the text exposition format, version 0.0.4) from what
  # the stats already know: the Puma-shaped stats (Stats: a single process's
  # counters, or a cluster's worker_status with each worker's last status),
  # the memory report (Stats.memory_report) and the cluster's restarts. The
  # names dashboards use for Puma are kept (yabeda-puma-plugin's puma_*
  # gauges, with an index label per worker: "0" in single mode); Margay's own
  # figures are margay_*, and the request duration is OpenTelemetry's
  # http_server_request_duration_seconds. A key that is not there (a
  # histogram not measured, a worker that has not reported yet) renders no
  # sample. docs/CONTROL.md lists every metric.
  #
  #   Metrics.render(Margay.stats_hash, memory: Margay.memory_hash)
  #   Metrics.snapshot(server_or_cluster)   # the same, from the runner
  module Metrics
    # The Content-Type of the text (what a scrape of /metrics answers).
    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    # A serving process's gauges with Puma's names: [stats key, name, help].
    PUMA_GAUGES = [
      [:backlog, "puma_backlog", "Requests waiting for a thread"],
      [:running, "puma_running", "Threads in the pool"],
      [:busy_threads, "puma_busy_threads", "Threads running a request"],
      [:pool_capacity, "puma_pool_capacity", "Requests the pool could take now (max_threads - busy_threads)"],
      [:max_threads, "puma_max_threads", "The most threads the pool may have"],
      [:requests_count, "puma_requests_count", "Requests read since the process started (a gauge, as Puma's)"]
    ].freeze
    # A serving process's own figures beyond Puma's: [stats key, type, name, help].
    PROCESS = [
      [:reactor_max, :gauge, "margay_connections", "Client connections the engine holds now"],
      [:errors, :counter, "margay_request_errors_total",
       "Requests whose app raised, timed out or answered an invalid response"],
      [:abandoned, :counter, "margay_requests_abandoned_total",
       "Requests not run because their client had closed its side first"],
      [:shed, :counter, "margay_requests_shed_total", "Requests answered 503 because they waited over queue_timeout"]
    ].freeze
    # A serving process's histograms: [stats key, name, help].
    HISTOGRAMS = [
      [:queue_time_seconds, "margay_queue_time_seconds",
       "Time from a request's arrival to the moment a thread started it"],
      [:request_duration_seconds, "http_server_request_duration_seconds",
       "Time the app took for a request, from its call to the end of its response"]
    ].freeze
    # The cluster's gauges with Puma's names: [stats key, name, help].
    CLUSTER_GAUGES = [
      [:workers, "puma_workers", "Workers the cluster has (booting and old ones included)"],
      [:booted_workers, "puma_booted_workers", "Workers that serve"],
      [:old_workers, "puma_old_workers", "Workers of a phase before the current one, to be replaced"]
    ].freeze
    # What a Server's stats (Server#stats) carry beyond Puma's counters, rendered when there.
    SERVER_KEYS = (PROCESS.map(&:first) + HISTOGRAMS.map(&:first) + %i[busy_ms listen_queue] - Stats::COUNTERS).freeze

    # Renders a runner's metrics at most every +interval+ seconds and hands
    # the text to +sink+ (the health listener's metrics_text=): what a
    # supervisor or master tick calls each time round; the render, which
    # reads every worker's status, runs at most once an interval.
    #
    #   publisher = Metrics::Publisher.new(cluster) { |text| health.metrics_text = text }
    #   publisher.tick   # from the tick; publishes when due
    class Publisher
      INTERVAL = 1.0

      # @param runner [Server, Cluster] what Metrics.snapshot renders
      # @param interval [Numeric] seconds between renders
      # @param clock [#now] Margay::Clock (a test gives its own)
      # @param sink [#call] receives the text
      def initialize(runner, interval: INTERVAL, clock: Clock, &sink)
        raise ArgumentError, "a sink (block) is needed" unless sink

        @runner = runner
        @interval = interval
        @clock = clock
        @sink = sink
        @due = nil
      end

      # Render and publish when the interval has passed since the last
      # time (at once the first time). Returns the text published, or nil.
      def tick
        now = @clock.now
        return nil if @due && now < @due

        @due = now + @interval
        text = Metrics.snapshot(@runner)
        @sink.call(text)
        text
      end
    end

    class << self
      # The text for +stats+ (a Puma-shaped stats Hash: Stats.single or
      # Stats.cluster, whose processes' statuses may carry SERVER_KEYS, and a
      # cluster's +worker_restarts+: { index => count }) and +memory+ (a
      # Stats.memory_report; nil: no memory figures).
      def render(stats, memory: nil)
        text = Exposition.new
        info(text, stats)
        if stats.key?(:worker_status)
          cluster(text, stats)
        else
          process(text, stats, index: 0)
        end
        memory_figures(text, memory) if memory
        text.to_s
      end

      # The text for a runner: a Cluster (its master: every worker's last
      # status, restarts and memory) or a Server (this process). Meant for a
      # periodic publisher (Publisher), not for every request: a cluster's
      # memory figures are its workers' last reports, this process's are
      # read at most every Stats::Memory::INTERVAL.
      def snapshot(runner)
        return render(runner.metrics_stats, memory: runner.memory) if runner.respond_to?(:metrics_stats)

        server_stats = runner.stats
        stats = Stats.single(server_stats, runner.config.max_threads).merge(server_stats.slice(*SERVER_KEYS))
        stats[:listen_queue] ||= listen_queue(runner.listeners)
        render(stats, memory: Stats::Memory.current)
      end

      # Clients in the TCP listeners' accept queues (Cluster::QueueReport's
      # reading); nil without a TCP listener or where the system does not say.
      def listen_queue(listeners)
        queued = (listeners || []).filter_map { |l| Cluster::QueueReport.listen_queue(l.io) }
        queued.sum unless queued.empty?
      end

      private

      def info(text, stats)
        versions = stats[:versions]
        if versions
          text.gauge("margay_info", "Versions: Margay's, the Puma release whose surface it answers like, Ruby's", 1,
                     version: versions[:margay], puma_version: versions[:puma],
                     ruby_engine: versions.dig(:ruby, :engine), ruby_version: versions.dig(:ruby, :version))
        end
        text.gauge("margay_start_time_seconds", "When this process started serving (Unix time)",
                   unix_time(stats[:started_at]))
        # The listeners' (one set, whichever process accepts), not a worker's: no index.
        text.gauge("margay_listen_queue", "Clients waiting in the TCP listeners' accept queues",
                   number(stats[:listen_queue]))
      end

      # One serving process (single mode, or a cluster worker's last status).
      def process(text, status, index:)
        labels = { index: index }
        PUMA_GAUGES.each { |key, name, help| text.gauge(name, help, number(status[key]), labels) }
        PROCESS.each { |key, type, name, help| text.public_send(type, name, help, number(status[key]), labels) }
        busy = number(status[:busy_threads])
        max = number(status[:max_threads])
        if busy && max&.positive?
          text.gauge("margay_utilization_ratio", "Busy threads over max_threads, now (0 to 1)",
                     busy.fdiv(max).clamp(0.0, 1.0), labels)
        end
        busy_ms = number(status[:busy_ms])
        text.counter("margay_busy_thread_seconds_total",
                     "Thread-seconds spent on requests (its rate over puma_max_threads: the utilization)",
                     busy_ms && busy_ms / 1000.0, labels)
        oldest_ms = number(status[:oldest_wait_ms])
        text.gauge("margay_oldest_wait_seconds",
                   "How long the longest-waiting request for a thread has waited, at the last look",
                   oldest_ms && oldest_ms / 1000.0, labels)
        HISTOGRAMS.each do |key, name, help|
          text.histogram(name, help, status[key], labels) if histogram?(status[key])
        end
      end

      def cluster(text, stats)
        CLUSTER_GAUGES.each { |key, name, help| text.gauge(name, help, number(stats[key]), {}) }
        text.counter("margay_phased_restarts_total", "Phased restarts (USR1) since the master started",
                     number(stats[:phase]), {})
        restarts = stats[:worker_restarts] || {}
        stats[:worker_status].each do |worker|
          index = worker[:index]
          text.gauge("margay_worker_booted", "1: the worker serves; 0: it boots", worker[:booted] ? 1 : 0,
                     index: index)
          text.gauge("margay_worker_start_time_seconds", "When the master started the worker (Unix time)",
                     unix_time(worker[:started_at]), index: index)
          text.counter("margay_worker_restarts_total",
                       "Workers started in this slot after its first (a crash, a timeout, a phased restart, a refork)",
                       restarts.fetch(index, 0), index: index)
          status = worker[:last_status]
          process(text, status, index: index) unless status.nil? || status.empty?
        end
      end

      # RSS and PSS per process: each worker (single mode: the process, as
      # worker 0), and in a cluster the master and the mold.
      def memory_figures(text, report)
        if report.key?(:workers)
          memory_sample(text, report[:master], role: "master")
          report[:workers].each do |w|
            memory_sample(text, w[:memory], role: w[:mold] ? "mold" : "worker", index: w[:index])
          end
        else
          memory_sample(text, report, role: "worker", index: 0)
        end
      end

      # A reading of 0 is none (a worker before its first report; PSS where the system has no smaps_rollup).
      def memory_sample(text, reading, labels)
        return unless reading

        rss = reading[:rss_kib].to_i
        pss = reading[:pss_kib].to_i
        text.gauge("margay_memory_rss_bytes", "Resident memory of the process", (rss * 1024 if rss.positive?), labels)
        text.gauge("margay_memory_pss_bytes",
                   "Proportional share of memory of the process (shared pages divided among their users)",
                   (pss * 1024 if pss.positive?), labels)
      end

      def number(value)
        value if value.is_a?(Numeric)
      end

      def histogram?(value)
        value.is_a?(Hash) && value[:buckets].is_a?(Hash) && value[:count].is_a?(Numeric) && value[:sum].is_a?(Numeric)
      end

      # A Time or Puma's "2026-11-24T14:01:28Z" as seconds since the epoch (nil stays nil).
      def unix_time(value)
        case value
        when Time then value.to_i
        when String then Time.iso8601(value).to_i
        end
      rescue ArgumentError
        nil
      end
    end
  end
end
