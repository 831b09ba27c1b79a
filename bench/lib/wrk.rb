# frozen_string_literal: true

require "json"
require_relative "procs"

module MargayBench
  # One bounded wrk run with bench/wrk/report.lua, whose done() hook prints the totals and
  # latency percentiles (wrk's own) as a BENCH_JSON line.
  module Wrk
    module_function

    def argv(threads:, connections:, seconds:, timeout:, url:)
      ["wrk", "-t#{threads}", "-c#{connections}", "-d#{seconds}s", "--timeout", "#{timeout}s", "--latency",
       "-s", "bench/wrk/report.lua", url]
    end

    # Runs +argv+ in ROOT with its output in +out_path+, killed after +bound+ seconds;
    # yields wrk's pid once it is started (so a signal handler can stop it). Returns
    # [the parsed BENCH_JSON, wrk's text output without that line].
    def run(argv, out_path:, bound:, env: {}, &started)
      status, out = Procs.run_bounded(argv, out_path: out_path, bound: bound, env: env, &started)
      json = out[/^BENCH_JSON (.*)$/, 1]
      raise "wrk failed (#{status}): #{out.lines.last(5).join}" unless json

      [JSON.parse(json), out.sub(/^BENCH_JSON .*\n?/, "")]
    end
  end
end
