# frozen_string_literal: true

require_relative "options"
require_relative "../report_lines"

module MargayBench
  # The verdicts (issue 13's bars and issue 12's tail bars against the medians of one run) and the Markdown report
  # of bench/waiting.rb (waiting-latest.md).
  class WaitingReport
    F = "margay-fibers"

    # One verdict per bar and concurrency that this run has the rows for:
    # { "bar", "check", "value", "target", "met", "detail" }.
    def self.verdicts(summary)
      row = ->(bar, server, c) { summary.find { |r| r["bar"] == bar && r["server"] == server && r["concurrency"] == c } }
      out = []
      add = lambda do |bar, check, value, target, met, detail|
        out << { "bar" => bar, "check" => check, "value" => value&.round(2), "target" => target, "met" => met,
                 "detail" => detail }
      end
      ratio = ->(a, b) { a && b && b["rps_median"].to_f.positive? ? a["rps_median"] / b["rps_median"] : nil }

      f256 = row.call("sleep", F, 256)
      if f256
        [["itsi", 1.2], ["puma", 20.0]].each do |peer, target|
          r = ratio.call(f256, row.call("sleep", peer, 256))
          next unless r

          add.call("sleep", "c=256 req/s margay-fibers / #{peer} ≥ #{target}", r, target, r >= target,
                   "#{f256['rps_median'].round} vs #{row.call('sleep', peer, 256)['rps_median'].round}")
        end
        add.call("sleep", "c=256 margay-fibers p99 ≤ 25 ms", f256["p99_ms"], 25, f256["p99_ms"] <= 25,
                 "#{f256['p99_ms']} ms")
        if (f1024 = row.call("sleep", F, 1024))
          r = f1024["rps_median"] / f256["rps_median"]
          add.call("sleep", "c=1024 req/s ≥ c=256 req/s (margay-fibers)", r, 1.0, r >= 1.0,
                   "#{f1024['rps_median'].round} vs #{f256['rps_median'].round}")
        end
      end

      fc = row.call("cluster", F, 256)
      if fc && (fa = row.call("cluster", "falcon", 256))
        r = ratio.call(fc, fa)
        add.call("cluster", "2 workers c=256 req/s margay-fibers / falcon ≥ 1", r, 1.0, r >= 1.0,
                 "#{fc['rps_median'].round} vs #{fa['rps_median'].round}")
      end

      summary.select { |r| r["bar"] == "rails" && r["server"] == F }.each do |fr|
        c = fr["concurrency"]
        pu = row.call("rails", "puma", c)
        next unless pu

        r = ratio.call(fr, pu)
        add.call("rails", "c=#{c} req/s margay-fibers / puma ≥ 2", r, 2.0, r >= 2.0,
                 "#{fr['rps_median'].round} vs #{pu['rps_median'].round}")
        pr = pu["p99_ms"].to_f.positive? ? fr["p99_ms"] / pu["p99_ms"] : nil
        add.call("rails", "c=#{c} p99 margay-fibers / puma ≤ 0.5", pr, 0.5, pr && pr <= 0.5,
                 "#{fr['p99_ms']} vs #{pu['p99_ms']} ms")
        add.call("rails", "c=#{c} margay-fibers errors = 0", fr["errors"], 0, fr["errors"].zero?,
                 "#{fr['non2xx']} non-2xx, #{fr['timeouts']} timeouts, #{fr['socket_errors']} socket errors")
        if fr["pss_mib"] && pu["pss_mib"]
          m = fr["pss_mib"] / pu["pss_mib"]
          add.call("rails", "c=#{c} PSS margay-fibers / puma ≤ 1", m, 1.0, m <= 1.0,
                   "#{fr['pss_mib']} vs #{pu['pss_mib']} MiB")
        end
      end
      tail_verdicts(summary, row, ratio, add)
      out
    end

    # The tail bars: each Margay row of a tail bar against Puma's at the same concurrency (p99 no
    # higher at >= 0.95x its req/s, no more errors: wrk leaves timed-out requests out of its
    # latencies), and against its own mean (a server that serves in arrival order keeps its p99
    # near the mean wait).
    def self.tail_verdicts(summary, row, ratio, add)
      summary.select { |r| WaitingBars::ALL.dig(r["bar"], :tail) && r["server"] != "puma" }.each do |m|
        pu = row.call(m["bar"], "puma", m["concurrency"])
        next unless pu && pu["p99_ms"].to_f.positive? && (rr = ratio.call(m, pu))

        pr = m["p99_ms"] / pu["p99_ms"]
        add.call(m["bar"], "c=#{m['concurrency']} #{m['server']} p99 / puma ≤ 1.0 at ≥ 0.95x its req/s", pr, 1.0,
                 pr <= 1.0 && rr >= 0.95 && m["errors"] <= pu["errors"],
                 "p99 #{m['p99_ms']} vs #{pu['p99_ms']} ms at #{m['rps_median'].round} vs " \
                 "#{pu['rps_median'].round} req/s, #{rr.round(2)}x, errors #{m['errors']} vs #{pu['errors']}")
        next unless m["mean_ms"].to_f.positive?

        own = m["p99_ms"] / m["mean_ms"]
        add.call(m["bar"], "c=#{m['concurrency']} #{m['server']} p99 / own mean ≤ 1.25", own, 1.25, own <= 1.25,
                 "p99 #{m['p99_ms']} ms, mean #{m['mean_ms']} ms (puma: #{(pu['p99_ms'] / pu['mean_ms'].to_f).round(2)}x)")
      end
    end
    private_class_method :tail_verdicts

    def initialize(result)
      @r = result
    end

    def markdown
      c = @r["config"]
      m = @r["machine"]
      v = @r["versions"]
      l = []
      l << "### bench/waiting.rb (#{@r['mode']} mode), #{@r['started_at']}"
      l << ""
      l << "Command: `bench/waiting.rb #{@r['argv'].join(' ')}`. Machine: #{m['nproc']} CPUs (#{m['cpu_model']}), " \
           "Linux #{m['kernel']}, load average at start #{m['loadavg']}. #{v['ruby']}. Margay #{v['margay']} " \
           "(#{v['margay_commit']}, #{v['margay_dir']}), Puma #{v['puma']}, Falcon #{v['falcon']} (async #{v['async']}, " \
           "io-event #{v['io-event']}), Itsi #{v['itsi-server']} (itsi-scheduler #{v['itsi-scheduler']}), Rails #{v['rails']}, " \
           "pg #{v['pg']}, #{v['postgresql'] || 'PostgreSQL not started'}, #{v['wrk']}. #{c['rounds']} round(s) x " \
           "#{c['duration_s']} s per point (+ #{c['warmup_s']} s warm-up), elapsed #{(@r['elapsed_s'].to_f / 60).round(1)} min; " \
           "`#{c['wrk_command']}`."
      unless @r["servers_unavailable"].empty?
        l << ""
        l << "Not run: " + @r["servers_unavailable"].map { |u| "**#{u['server']}**: #{u['reason']}" }.join(" ")
      end
      verdicts(l)
      tables(l)
      failures(l)
      l.join("\n") << "\n"
    end

    private

    def verdicts(l)
      vs = @r["verdicts"]
      return if vs.nil? || vs.empty?

      l << ""
      l << "#### Bars (issues 12 and 13)"
      l << ""
      l << "| bar | check | value | met |"
      l << "|---|---|---:|---|"
      vs.each do |x|
        l << "| #{x['bar']} | #{x['check']} | #{x['value']} (#{x['detail']}) | #{x['met'] ? 'met' : '**not met**'} |"
      end
    end

    def tables(l)
      rows = @r["summary"]
      det = @r.dig("config", "bars_detail") || {}
      rows.map { |x| x["bar"] }.uniq.each do |bar|
        l << ""
        l << "#### #{bar}: #{det.dig(bar, 'what')} (`#{det.dig(bar, 'app')}` `GET #{det.dig(bar, 'path')}`, " \
             "workers #{det.dig(bar, 'workers')})"
        l << ""
        l << "| c | server | req/s (median) | req/s per round | p50 ms | p99 ms | max ms | errors | PSS MiB | procs | CPU µs/req | pg / slow svc CPU % | other CPU % (max) |"
        l << "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"
        rows.select { |x| x["bar"] == bar }.each do |x|
          h = x["helpers_cpu_pct_median"]
          l << "| #{x['concurrency']} | #{x['server']} | #{x['rps_median']&.round} | #{x['rps_all'].map(&:round).join(', ')} | " \
               "#{x['p50_ms']} | #{x['p99_ms']} | #{x['max_ms']} | #{x['errors']} | #{x['pss_mib']} | #{x['processes']} | " \
               "#{x['server_cpu_us_per_request']&.round} | #{h ? "#{h['postgres']} / #{h['slow_service']}" : '–'} | " \
               "#{x['other_cpu_pct_max']} |"
        end
      end
      l << ""
      l << "Latencies: wrk's (closed loop, keep-alive), median over rounds. errors: non-2xx + timeouts + socket " \
           "errors, summed over rounds. PSS: peak over the measured run of the sum over the server's processes " \
           "(`/proc/PID/smaps_rollup`), median over rounds. pg / slow svc: CPU of the PostgreSQL cluster and of " \
           "bench/slow_service.rb during the run, in % of one CPU. other CPU: what processes other than the " \
           "server, wrk, PostgreSQL and the slow service used during the run, in % of all CPUs (the worst round; " \
           "above 5 % the run was disturbed)."
    end

    def failures(l)
      ReportLines.failures(l, @r["failures"]) do |f|
        [f["bar"], f["concurrency"] && "c=#{f['concurrency']}", f["round"] && "round #{f['round']}"]
      end
    end
  end
end
