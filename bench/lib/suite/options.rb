# frozen_string_literal: true

require_relative "../runner_options"
require_relative "servers"

module MargayBench
  # The suite's workloads: rackup file, path, what it does, wrk extras.
  WORKLOADS = {
    "hello" => { app: "bench/apps/hello.ru", path: "/", what: "13-byte `Hello, World!`" },
    "realistic" => { app: "bench/apps/rails/config.ru", path: "/",
                     what: "Rails 7.2 + ActiveRecord/SQLite: 2 queries + ERB template with layout (~2.5 KB)" },
    "io" => { app: "bench/apps/io.ru", path: "/", what: "sleep 10 ms + build a 2 KB JSON body (the sleep workload of issue 13)" },
    # Issue 13's waiting Rails workloads: the same app on PostgreSQL (a cluster bench/run.rb
    # starts, bench/lib/postgres.rb), and after a 50 ms Net::HTTP call to bench/slow_service.rb.
    "rails-pg" => { app: "bench/apps/rails/config.ru", path: "/", postgres: true,
                    what: "Rails 7.2 + ActiveRecord/PostgreSQL (unix socket): 2 queries + ERB template with layout" },
    "rails-pg-slow" => { app: "bench/apps/rails/config.ru", path: "/slow", postgres: true, slow_service: true,
                         what: "rails-pg after a 50 ms Net::HTTP GET to a local slow service (bench/slow_service.rb)" },
    "cpu" => { app: "bench/apps/cpu.ru", path: "/", what: "~5 ms of pure Ruby (fixed 72k-iteration loop)" },
    "big" => { app: "bench/apps/big.ru", path: "/", what: "1 MiB response body" },
    "upload" => { app: "bench/apps/upload.ru", path: "/", what: "8 MiB POST body, read fully by the app",
                  upload_bytes: 8 * 1024 * 1024 },
    "slow" => { app: "bench/apps/slow_clients.ru", path: "/",
                what: "hello, while extra connections (25% of N) trickle request heads at 1 byte/s " \
                      "and N/16 never read a 16 MiB response (bench/slow_clients.rb)" }
  }.freeze

  # bench/run.rb's command-line options with the defaults of the full and the quick mode.
  class SuiteOptions < RunnerOptions
    FULL = { repeats: 3, duration: 5, warmup: 1, concurrency: [1, 4, 16, 64, 256],
             workloads: WORKLOADS.keys, slo_duration: 5, charts: true }.freeze
    QUICK = { repeats: 1, duration: 1, warmup: 1, concurrency: [4, 64], workloads: %w[hello realistic],
              slo_duration: 1.5, slo_probes: 1, charts: false }.freeze

    attr_accessor :servers, :workloads, :concurrency, :repeats, :duration, :warmup, :wrk_timeout,
                  :slo_workloads, :slo_p99_ms, :slo_duration, :slo_probes, :slo_max_rate, :charts,
                  :charts_dir, :report_only, :noise_pct, :start_timeout, :update_docs

    def initialize(argv)
      super()
      @servers = nil
      @wrk_timeout = 5
      @slo_workloads = %w[realistic io cpu]
      @slo_p99_ms = 100.0
      @slo_probes = nil
      @slo_max_rate = 2500
      @charts_dir = File.join(ROOT, "docs", "charts")
      @noise_pct = 5.0
      @start_timeout = 60
      @update_docs = false
      parse(argv)
      @slo_probes ||= 5
      raise OptionParser::InvalidArgument, "--slo-probes must be at least 1" if @slo_probes < 1
      @servers ||= SuiteServers::ALL.dup
      bad = @servers - SuiteServers::ALL
      raise OptionParser::InvalidArgument, "unknown server(s) #{bad.join(', ')}" unless bad.empty?
      bad = @workloads - WORKLOADS.keys
      raise OptionParser::InvalidArgument, "unknown workload(s) #{bad.join(', ')}" unless bad.empty?
      raise OptionParser::InvalidArgument, "durations must be <= 60 s" if @duration > 60 || @slo_duration > 60
    end

    private

    def parser(ov)
      OptionParser.new do |o|
        usage(o, "bench/run.rb", "smoke mode: 1 repeat, 1 s runs, concurrency 4,64, hello + realistic, one SLO probe, " \
                                 "no charts (< 3 min)")
        o.on("--servers LIST", Array, "subset of #{SuiteServers::ALL.join(',')} (default: all)") { |v| @servers = v }
        o.on("--workloads LIST", Array, "subset of #{WORKLOADS.keys.join(',')} (full: all)") { |v| ov[:workloads] = v }
        o.on("--concurrency LIST", Array, "connection counts (full 1,4,16,64,256)") do |v|
          ov[:concurrency] = v.map { |c| Integer(c) }
        end
        o.on("--repeats N", Integer, "repeats, server order rotated each time (full 3)") { |v| ov[:repeats] = v }
        o.on("--duration S", Integer, "seconds per measured wrk run (full 5)") { |v| ov[:duration] = v }
        o.on("--warmup S", Integer, "seconds of discarded warm-up per concurrency (full 1; 0: none)") { |v| ov[:warmup] = v }
        o.on("--wrk-timeout S", Integer, "wrk --timeout (default 5)") { |v| @wrk_timeout = v }
        o.on("--slo-workloads LIST", Array, "workloads with a capacity search (default realistic,io,cpu; 'none')") do |v|
          @slo_workloads = v == ["none"] ? [] : v
        end
        o.on("--slo-p99-ms MS", Float, "the SLO: p99 latency bound (default 100)") { |v| @slo_p99_ms = v }
        o.on("--slo-duration S", Float, "seconds per arrival-rate probe (full 5)") { |v| ov[:slo_duration] = v }
        o.on("--slo-probes N", Integer, "arrival-rate probes per capacity search: the best closed-loop req/s, then bisection (default 5)") do |v|
          ov[:slo_probes] = v
        end
        o.on("--slo-max-rate R", Integer, "cap on probe rates (the Ruby client's own limit; default 2500)") do |v|
          @slo_max_rate = v
        end
        o.on("--[no-]charts", "write SVG charts to docs/charts (full: yes, quick: no)") { |v| ov[:charts] = v }
        o.on("--charts-dir DIR", "where the SVG charts go (default docs/charts)") { |v| @charts_dir = File.expand_path(v) }
        o.on("--update-docs", "replace the suite section of docs/BENCHMARKS.md with this run's report") do
          @update_docs = true
        end
        results_dir_option(o)
        report_only_option(o, "no measuring: rebuild Markdown (and charts) from a results file")
      end
    end
  end
end
