# frozen_string_literal: true

require_relative "../runner_options"
require_relative "servers"

module MargayBench
  # bench/waiting.rb's bars (issue 13's; issue 12's tail bars) and its command-line options.
  module WaitingBars
    ISSUE13 = {
      "sleep" => { app: "bench/apps/io.ru", path: "/", workers: 1, concurrency: [256, 1024],
                   servers: WaitingServers::ALL - ["margay-base"],
                   what: "10 ms sleep + 2 KB JSON (`bench/apps/io.ru`), single process" },
      "cluster" => { app: "bench/apps/io.ru", path: "/", workers: 2, concurrency: [256],
                     servers: %w[margay-fibers falcon],
                     what: "the same app, 2 workers (Falcon: 2 forked processes)" },
      "rails" => { app: "bench/apps/rails/config.ru", path: "/slow", workers: 1, concurrency: [64, 256],
                   servers: %w[margay margay-fibers puma falcon itsi], postgres: true, slow_service: true,
                   what: "Rails 7.2 + PostgreSQL (2 queries, ERB) after a 50 ms Net::HTTP call to " \
                         "`bench/slow_service.rb`, single process" }
    }.freeze
    # Issue 12 part 4, the tail at saturation: more connections than threads, Margay against Puma
    # with both servers' default threads (0:5), in a single process and with 2 and 4 workers
    # (preloaded), on the sleep app and on the Rails app with SQLite (CPU-bound: ~4-7 ms of Ruby
    # per request). The bars: Margay's p99 <= 1.0x Puma's at equal (>= 0.95x) or higher req/s, and
    # <= 1.25x its own mean latency.
    TAIL = [1, 2, 4].flat_map do |w|
      where = w == 1 ? "single process" : "#{w} workers, preloaded"
      [["tail-sleep-w#{w}", { app: "bench/apps/io.ru", path: "/", workers: w, concurrency: [64, 256], tail: true,
                              servers: %w[margay margay-fibers puma],
                              what: "the tail at saturation: 10 ms sleep + 2 KB JSON, #{where}" }],
       ["tail-rails-w#{w}", { app: "bench/apps/rails/config.ru", path: "/", workers: w, concurrency: [64, 256],
                              tail: true, sqlite: true, servers: %w[margay puma],
                              what: "the tail at saturation: Rails 7.2 + SQLite (2 queries, ERB), #{where}" }]]
    end.to_h.freeze
    ALL = ISSUE13.merge(TAIL).freeze
    # What --bars names besides single bars: "tail" is every tail bar, "tail-sleep" and
    # "tail-rails" one app's three.
    GROUPS = { "tail" => TAIL.keys, "tail-sleep" => TAIL.keys.grep(/sleep/), "tail-rails" => TAIL.keys.grep(/rails/) }.freeze

    module_function

    # The bars +names+ stand for (groups expanded, order kept, each once).
    def expand(names)
      names.flat_map { |n| GROUPS.fetch(n, [n]) }.uniq
    end
  end

  # bench/waiting.rb's options with the defaults of the full and the quick mode.
  class WaitingOptions < RunnerOptions
    FULL = { rounds: 3, duration: 5, warmup: 2 }.freeze
    QUICK = { rounds: 1, duration: 2, warmup: 1 }.freeze

    attr_accessor :bars, :servers, :rounds, :duration, :warmup, :wrk_timeout, :margay_dir,
                  :start_timeout, :concurrency, :report_only, :rails_pool, :baseline

    def initialize(argv)
      super()
      @bars = WaitingBars::ISSUE13.keys
      @servers = nil
      @concurrency = nil
      @wrk_timeout = 10
      @margay_dir = ROOT
      @start_timeout = 60
      @rails_pool = 64
      parse(argv)
      @bars = WaitingBars.expand(@bars)
      bad = @bars - WaitingBars::ALL.keys
      raise OptionParser::InvalidArgument, "unknown bar(s) #{bad.join(', ')}" unless bad.empty?
      bad = (@servers || []) - WaitingServers::ALL
      raise OptionParser::InvalidArgument, "unknown server(s) #{bad.join(', ')}" unless bad.empty?
      raise OptionParser::InvalidArgument, "--duration must be 1..60 s" unless (1..60).cover?(@duration)
      raise OptionParser::InvalidArgument, "--rounds must be at least 1" if @rounds < 1
    end

    # The servers of +bar+ this run measures (with --baseline, margay-base after margay).
    def servers_for(bar)
      list = WaitingBars::ALL.fetch(bar)[:servers]
      list = list.flat_map { |s| s == "margay" ? %w[margay margay-base] : [s] }.uniq if @baseline
      @servers ? list & @servers : list
    end

    # The Margay tree +server+ runs from (nil: margay-base without --baseline).
    def margay_dir_for(server)
      server == "margay-base" ? @baseline : @margay_dir
    end

    def concurrency_for(bar)
      @concurrency || WaitingBars::ALL.fetch(bar)[:concurrency]
    end

    private

    def parser(ov)
      OptionParser.new do |o|
        usage(o, "bench/waiting.rb", "smoke mode: 1 round x 2 s (+1 s warm-up) per point")
        o.on("--bars LIST", Array, "subset of #{WaitingBars::ISSUE13.keys.join(',')} (default: these three), " \
                                   "#{WaitingBars::TAIL.keys.join(',')} or the groups #{WaitingBars::GROUPS.keys.join(',')}") do |v|
          @bars = v
        end
        o.on("--servers LIST", Array, "only these of #{WaitingServers::ALL.join(',')} (default: each bar's own)") do |v|
          @servers = v
        end
        o.on("--concurrency LIST", Array, "connection counts for every bar (default: each bar's own)") do |v|
          @concurrency = v.map { |c| Integer(c) }
        end
        o.on("--rounds N", Integer, "rounds, server order rotated each round (full 3)") { |v| ov[:rounds] = v }
        o.on("--duration S", Integer, "seconds per measured wrk run (full 5)") { |v| ov[:duration] = v }
        o.on("--warmup S", Integer, "seconds of discarded warm-up per point (full 2; 0: none)") { |v| ov[:warmup] = v }
        o.on("--wrk-timeout S", Integer, "wrk --timeout (default 10)") { |v| @wrk_timeout = v }
        o.on("--margay-dir DIR", "the Margay checkout to run (built: lib/margay/margay_native.so; default: this one)") do |v|
          @margay_dir = File.expand_path(v)
        end
        baseline_option(o, "also run this Margay checkout (built) as margay-base, beside margay in every bar " \
                           "(a before/after comparison in the same run, alternated)")
        results_dir_option(o)
        o.on("--rails-pool N", Integer, "ActiveRecord connections per process for the rails bar (default 64)") do |v|
          @rails_pool = v
        end
        report_only_option(o, "no measuring: print the Markdown of a results file (and write it beside it as .md)")
        o.on("--start-timeout S", Integer, "seconds a server gets to answer its first request (default 60)") do |v|
          @start_timeout = v
        end
      end
    end
  end
end
