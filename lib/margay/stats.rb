# frozen_string_literal: true

require "json"
require_relative "process/allocator"
require_relative "version"

module Margay
  # Puma-shaped statistics: what the control app's /stats answers, what
  # Margay.stats / Margay.stats_hash (and Puma.stats under the plugin shim)
  # return, so that tools written for Puma's stats read Margay's unchanged.
  #
  #   single:  {started_at, the COUNTERS, versions}
  #   cluster: {started_at, workers, phase, booted_workers, old_workers,
  #             worker_status: [{started_at, pid, index, phase, booted,
  #             last_checkin, last_status: {the COUNTERS}}], versions}
  #
  # Every key Puma 8 answers is there. backlog: the requests accepted that
  # wait for a thread (Engine#backlog); backlog_max is 0; io_threads is 0 (the pool counts
  # the threads marked I/O-bound for its growth only, and Server#stats does
  # not pass that count on); reactor_max is the connections the engine holds
  # now (docs/CONTROL.md).
  module Stats
    # The counters of one serving process, in Puma's order.
    COUNTERS = %i[backlog running pool_capacity busy_threads io_threads backlog_max max_threads requests_count
                  reactor_max].freeze
    # Margay's own counters of a serving process, beyond Puma's: requests
    # whose app failed (errors), requests not run because their client had
    # gone (abandoned), the thread-milliseconds its threads spent on requests
    # (busy_ms), requests answered 503 for waiting over queue_timeout (shed), and how long the
    # longest-waiting request among the backlog has waited, in ms (oldest_wait_ms). Not in Puma's
    # stats keys; Metrics renders the counters, and a cluster worker's travel in its status frame.
    OWN_COUNTERS = %i[errors abandoned busy_ms shed oldest_wait_ms].freeze
    # A serving process's histograms (Server#stats: {buckets: {le => cumulative count, ...,
    # Float::INFINITY => count}, sum: seconds, count:}) and their bucket bounds, the engine's
    # (OpenTelemetry's default HTTP buckets).
    HISTOGRAMS = %i[queue_time_seconds request_duration_seconds].freeze
    HISTOGRAM_BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                        Float::INFINITY].freeze
    # The HISTOGRAMS as integers, for a cluster worker's status frame: per histogram, each
    # bound's cumulative count (name_b0 ...), then the sum in microseconds (name_sum_us).
    HISTOGRAM_KEYS = HISTOGRAMS.flat_map do |name|
      Array.new(HISTOGRAM_BOUNDS.size) { |i| :"#{name}_b#{i}" } + [:"#{name}_sum_us"]
    end.freeze
    # The Puma release whose stats, control app and plugin API Margay answers
    # like (versions.puma; Puma::Const::VERSION under Margay's plugin shim).
    PUMA_API_VERSION = "8.0.2"

    # Memory of this process: RSS and PSS in KiB from
    # /proc/self/smaps_rollup (Linux 4.14+; RSS alone from /proc/self/status
    # before that; zeros where there is no /proc), read at most every
    # INTERVAL seconds (a read walks the process's mappings: cheap, but not
    # for every request). boot_*: the first reading after #boot!, which a
    # worker calls as it starts serving (single mode: when it starts), so
    # that the growth since boot shows. Kept apart from Puma's stats keys
    # (tools compare those with Puma's): the control app answers it on
    # GET /memory, and a cluster worker's travels in its status frame.
    module Memory
      KEYS = %i[rss_kib pss_kib boot_rss_kib boot_pss_kib].freeze
      INTERVAL = 5.0

      @last = nil
      @read_at = nil
      @boot = nil

      class << self
        # { rss_kib:, pss_kib: } now.
        def read
          rollup = File.read("/proc/self/smaps_rollup")
          { rss_kib: rollup[/^Rss:\s+(\d+)/, 1].to_i, pss_kib: rollup[/^Pss:\s+(\d+)/, 1].to_i }
        rescue SystemCallError
          status_rss
        end

        # Start anew in this process (a forked worker): the next reading is its boot value.
        def boot!
          @last = @read_at = @boot = nil
        end

        # The KEYS of this process, the current values at most INTERVAL seconds old.
        def current(now = Process.clock_gettime(Process::CLOCK_MONOTONIC))
          if @read_at.nil? || now - @read_at >= INTERVAL
            @last = read
            @read_at = now
            @boot ||= @last
          end
          { rss_kib: @last[:rss_kib], pss_kib: @last[:pss_kib], boot_rss_kib: @boot[:rss_kib],
            boot_pss_kib: @boot[:pss_kib] }
        end

        private

        def status_rss
          { rss_kib: File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i, pss_kib: 0 }
        rescue SystemCallError
          { rss_kib: 0, pss_kib: 0 }
        end
      end
    end

    # What GET /memory answers. Single mode: this process's Memory. Cluster
    # (the master): the master's, each serving worker's (from its last
    # status frame) and the totals, PSS summed over every process of the
    # cluster (the mold too while there is one): what the cluster costs.
    def self.memory_report(master: Memory.current, workers: nil)
      return master unless workers

      processes = [master] + workers.map { |w| w[:memory] }
      { master: master, workers: workers,
        total_rss_kib: processes.sum { |m| m[:rss_kib].to_i }, total_pss_kib: processes.sum { |m| m[:pss_kib].to_i } }
    end

    # A cluster worker's own source: Margay.stats_hash in a worker answers its
    # server's counters, Margay.metrics its server's metrics (Metrics, which
    # cluster/worker.rb loads).
    WorkerSource = Struct.new(:server, :max_threads) do
      def stats = Stats.single(server.stats, max_threads)
      def metrics = Metrics.snapshot(server)
    end

    # Answers Margay.stats_hash, whichever process asks (Puma.stats_object
    # points here: a cluster worker's Puma.stats is the worker's).
    module Current
      def self.stats = Margay.stats_hash
    end

    @source = nil
    @started_at = nil
    @memory_source = nil

    class << self
      # When this process started serving (a Time; set by Operations).
      attr_reader :started_at

      # Set by Operations as the process starts serving: also the moment of
      # its memory's boot reading (Memory).
      def started_at=(time)
        @started_at = time
        Memory.boot!
        Memory.current
      end

      # The object whose #memory answers Margay.memory_hash (a cluster's
      # master: the Cluster; nil: this process's own Memory).
      attr_accessor :memory_source

      # The object whose #stats answers Margay.stats_hash (a Launcher's
      # runner facade; nil: not serving).
      attr_accessor :source

      # The COUNTERS of a serving process from its Server#stats and its max_threads.
      def counters(server_stats, max_threads)
        busy = server_stats[:busy_threads].to_i
        { backlog: server_stats[:backlog].to_i, running: server_stats[:threads].to_i, pool_capacity: [max_threads - busy, 0].max,
          busy_threads: busy, io_threads: 0, backlog_max: 0, max_threads: max_threads,
          requests_count: server_stats[:requests].to_i, reactor_max: server_stats[:connections].to_i }
      end

      # The OWN_COUNTERS of a serving process from its Server#stats.
      def own_counters(server_stats)
        OWN_COUNTERS.to_h { |k| [k, server_stats[k].to_i] }
      end

      # The HISTOGRAMS of a Server#stats as HISTOGRAM_KEYS (zeros for one it does not have).
      def histogram_integers(server_stats)
        HISTOGRAMS.each_with_object({}) do |name, out|
          hist = server_stats[name]
          buckets = hist.is_a?(Hash) ? hist[:buckets] || {} : {}
          HISTOGRAM_BOUNDS.each_with_index { |le, i| out[:"#{name}_b#{i}"] = buckets[le].to_i }
          out[:"#{name}_sum_us"] = hist.is_a?(Hash) ? (hist[:sum].to_f * 1_000_000).round : 0
        end
      end

      # The HISTOGRAMS back from +status+'s HISTOGRAM_KEYS (a worker's last status frame):
      # those it carries, in Server#stats's shape.
      def histograms_from(status)
        HISTOGRAMS.each_with_object({}) do |name, out|
          next unless status.key?(:"#{name}_sum_us")

          buckets = HISTOGRAM_BOUNDS.each_with_index.to_h { |le, i| [le, status[:"#{name}_b#{i}"].to_i] }
          out[name] = { buckets: buckets, sum: status[:"#{name}_sum_us"].to_i / 1_000_000.0,
                        count: buckets[Float::INFINITY] }
        end
      end

      # Single mode: the server's counters.
      def single(server_stats, max_threads)
        { started_at: iso8601(started_at) }.merge(counters(server_stats, max_threads), versions: versions)
      end

      # Cluster mode, from the master's records of its serving workers
      # (WorkerRecord#to_stats) and the count of phased restarts so far.
      def cluster(worker_status, phase)
        { started_at: iso8601(started_at), workers: worker_status.size, phase: phase,
          booted_workers: worker_status.count { |w| w[:booted] },
          old_workers: worker_status.count { |w| w[:phase] != phase },
          worker_status: worker_status, versions: versions }
      end

      # What serves: the Puma release Margay answers like, Margay's own version, the Ruby, and
      # the allocator (Allocator: jemalloc or malloc).
      def versions
        { puma: PUMA_API_VERSION, margay: VERSION,
          ruby: { engine: RUBY_ENGINE, version: RUBY_VERSION, patchlevel: RUBY_PATCHLEVEL }, allocator: Allocator.name }
      end

      # Puma's time format: "2026-11-24T14:01:28Z" (nil stays nil).
      def iso8601(time)
        time&.utc&.strftime("%Y-%m-%dT%H:%M:%SZ")
      end
    end
  end

  # This process's stats as a Hash (Puma.stats_hash's shape); {} when it does not serve.
  def self.stats_hash
    source = Stats.source
    source ? source.stats : {}
  end

  # This process's memory (Stats.memory_report): the control app's GET /memory.
  def self.memory_hash
    source = Stats.memory_source
    source ? source.memory : Stats.memory_report
  end

  # How a cluster's waiting work is spread (Cluster#queue): the control app's GET /queue; nil
  # in a single process or a worker.
  def self.queue_hash
    source = Stats.memory_source
    source.respond_to?(:queue) ? source.queue : nil
  end

  # This process's Prometheus metrics (Metrics: the text exposition format):
  # a single server's, a cluster master's (every worker's), a worker's own;
  # "" when it does not serve.
  def self.metrics
    source = Stats.source
    source.respond_to?(:metrics) ? source.metrics : ""
  end

  # This process's stats as JSON (Puma.stats's shape).
  def self.stats
    JSON.generate(stats_hash)
  end
end
