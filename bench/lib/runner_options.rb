# frozen_string_literal: true

require "optparse"
require_relative "procs"

module MargayBench
  # What the options of core.rb, run.rb and waiting.rb share: a full and a quick mode (the
  # subclass's FULL and QUICK defaults, under what the command line set) and the options
  # every runner spells the same. A subclass sets its other defaults, then calls #parse with
  # its own #parser(overrides).
  class RunnerOptions
    attr_accessor :mode, :results_dir

    def initialize
      @mode = "full"
      @results_dir = File.join(BENCH, "results")
    end

    private

    # Parses +argv+ (nothing may be left over), then applies the mode's defaults under the
    # values the command line gave.
    def parse(argv)
      overrides = {}
      parser(overrides).parse!(argv)
      raise OptionParser::InvalidArgument, "unexpected argument(s): #{argv.join(' ')}" unless argv.empty?

      (@mode == "quick" ? self.class::QUICK : self.class::FULL).merge(overrides).each { |k, v| public_send(:"#{k}=", v) }
    end

    # The usage line of +script+ and --quick, described by +quick_help+.
    def usage(o, script, quick_help)
      o.banner = "usage: #{script} [--quick] [options]"
      o.on("--quick", quick_help) { @mode = "quick" }
    end

    def results_dir_option(o)
      o.on("--results-dir DIR", "where the JSON and Markdown go (default bench/results)") do |v|
        @results_dir = File.expand_path(v)
      end
    end

    # --baseline DIR: another Margay checkout, run as margay-base (+help+ says how).
    def baseline_option(o, help)
      o.on("--baseline DIR", help) { |v| @baseline = File.expand_path(v) }
    end

    def report_only_option(o, help)
      o.on("--report-only JSON", help) { |v| @report_only = File.expand_path(v) }
    end
  end
end
