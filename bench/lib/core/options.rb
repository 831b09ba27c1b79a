# frozen_string_literal: true

require_relative "../runner_options"

module MargayBench
  # bench/core.rb's command-line options with the defaults of the full and the quick mode.
  class CoreOptions < RunnerOptions
    # The default servers (single process each; Iodine with its best single-process setting).
    ALL_SERVERS = %w[margay iodine puma nginx].freeze
    # Asked for by name: 2-worker cluster Margay and nginx with 2 workers.
    CLUSTER_SERVERS = %w[margay-w2 nginx-w2].freeze
    # Every server bench/core.rb knows, in report order; margay-base only with --baseline.
    ORDER = %w[margay margay-base iodine puma nginx margay-w2 nginx-w2].freeze
    ALL_SCENARIOS = %w[hello slow].freeze
    FULL = { rounds: 3, duration: 10, warmup: 2, slow_duration: 20, slow_settle: 2, slow_rounds: 1 }.freeze
    QUICK = { rounds: 1, duration: 3, warmup: 1, slow_duration: 5, slow_settle: 1, slow_rounds: 1 }.freeze

    attr_accessor :servers, :scenarios, :connections, :rounds, :duration, :warmup,
                  :wrk_threads, :wrk_timeout, :margay_threads, :slow_duration, :slow_settle,
                  :slow_rounds, :slow_trickle, :slow_non_readers, :slow_request_timeout,
                  :start_timeout, :margay_exe, :baseline

    def initialize(argv)
      super()
      @servers = nil
      @scenarios = ALL_SCENARIOS.dup
      @connections = [16, 64, 256]
      @wrk_threads = 2
      @wrk_timeout = 2
      @margay_threads = nil
      @slow_trickle = 200
      @slow_non_readers = 20
      @slow_request_timeout = 5.0
      @start_timeout = 30
      @margay_exe = "exe/margay"
      @baseline = nil
      parse(argv)
      @servers ||= @baseline ? ORDER.dup : ALL_SERVERS.dup
      bad = @servers - (@baseline ? ORDER : ORDER - ["margay-base"])
      unless bad.empty?
        hint = bad.include?("margay-base") ? " (margay-base needs --baseline DIR)" : ""
        raise OptionParser::InvalidArgument, "unknown server(s) #{bad.join(', ')}#{hint}"
      end
      bad = @scenarios - ALL_SCENARIOS
      raise OptionParser::InvalidArgument, "unknown scenario(s) #{bad.join(', ')}" unless bad.empty?
    end

    # The Ruby servers: Margay (and its baseline) and Puma get the slow-client scenario.
    def ruby_servers
      @servers & %w[margay margay-base puma]
    end

    private

    def parser(overrides)
      OptionParser.new do |o|
        usage(o, "bench/core.rb", "one short round of everything (smoke test, < 2 min)")
        o.on("--servers LIST", Array, "any of #{ORDER.join(',')} (default: #{ALL_SERVERS.join(',')}, and margay-base " \
                                      "with --baseline)") do |v|
          @servers = v
        end
        o.on("--scenarios LIST", Array, "subset of #{ALL_SCENARIOS.join(',')} (default: all)") { |v| @scenarios = v }
        o.on("--connections LIST", Array, "wrk connection counts (default 16,64,256)") do |v|
          @connections = v.map { |c| Integer(c) }
        end
        o.on("--rounds N", Integer, "hello rounds per server (full 3, quick 1)") { |v| overrides[:rounds] = v }
        o.on("--duration S", Integer, "seconds per measured wrk run (full 10, quick 3)") { |v| overrides[:duration] = v }
        o.on("--warmup S", Integer, "seconds of discarded wrk warm-up (full 2, quick 1; 0: none)") do |v|
          overrides[:warmup] = v
        end
        o.on("--wrk-threads N", Integer, "wrk -t (default 2)") { |v| @wrk_threads = v }
        o.on("--margay-threads MIN:MAX", "Margay -t for hello (default: Margay's own default)") { |v| @margay_threads = v }
        o.on("--slow-duration S", Integer, "seconds of measured requests in the slow scenario (full 20, quick 5)") do |v|
          overrides[:slow_duration] = v
        end
        o.on("--slow-rounds N", Integer, "slow-scenario rounds per server (default 1)") { |v| overrides[:slow_rounds] = v }
        o.on("--slow-trickle N", Integer, "trickling connections (default 200)") { |v| @slow_trickle = v }
        o.on("--slow-non-readers N", Integer, "non-reading 16 MiB downloads (default 20)") { |v| @slow_non_readers = v }
        o.on("--margay-exe PATH", "Margay executable, run with `bundle exec` (default exe/margay)") do |v|
          @margay_exe = v
        end
        baseline_option(o, "another Margay checkout (e.g. a git worktree) with its extension compiled, run as " \
                           "server margay-base in the same rotation; the report gives margay / margay-base")
        results_dir_option(o)
      end
    end
  end
end
