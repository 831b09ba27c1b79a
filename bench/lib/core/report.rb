# frozen_string_literal: true

require_relative "../stats"

module MargayBench
  # bench/core.rb's report of one result: the bars of the issue (checked at 64
  # connections), the Markdown tables (core-latest.md), and with --baseline the ratios
  # margay / margay-base.
  class CoreReport
    NOISY_PCT = 5.0 # other processes' share of the CPUs during a run above which it is flagged

    def initialize(result)
      @result = result
    end

    # The bars, each { bar, target, value, met }: the core bars at 64 connections, and issue
    # 14's fast-path bars at 64 and 256 connections (Iodine, nginx, CPU per request) and for the
    # 2-worker cluster (margay-w2 vs nginx-w2) when those ran.
    def bars
      out = []
      rows = @result.dig("hello", "summary") || []
      at = ->(server, conns = 64) { rows.find { |r| r["server"] == server && r["connections"] == conns } }
      m = at.call("margay")
      n = at.call("nginx")
      p = at.call("puma")
      out << bar("req/s at 64 connections >= 0.5x nginx", m && n && m["rps_median"] / n["rps_median"], ">= 0.5") { |v| v >= 0.5 }
      out << bar("req/s at 64 connections >= 4x Puma", m && p && m["rps_median"] / p["rps_median"], ">= 4") { |v| v >= 4 }
      out << bar("p99 at 64 connections <= Puma's", m && p && [m["p99_ms"], p["p99_ms"]], "Margay <= Puma") { |a, b| a <= b }
      out << bar("RSS after the 64-connection run <= Puma's", m && p && [m["rss_mib_median"], p["rss_mib_median"]],
                 "Margay <= Puma (MiB, median)") { |a, b| a <= b }
      fast_path_bars(out, at)
      slow = (@result.dig("slow", "summary") || []).find { |r| r["server"] == "margay" }
      out << bar("slow clients: Margay p99 < 50 ms", slow && slow["p99_ms"], "< 50 ms") { |v| v < 50 }
      out
    end

    # core-latest.md: the tables of every scenario, the bars, the failures.
    def markdown
      lines = header
      hello(lines) if @result["hello"]
      slow(lines) if @result["slow"]
      baseline(lines) if @result["baseline"]
      bars_table(lines)
      failures(lines)
      lines.join("\n") << "\n"
    end

    private

    def fast_path_bars(out, at)
      [64, 256].each do |conns|
        m = at.call("margay", conns)
        i = at.call("iodine", conns)
        n = at.call("nginx", conns)
        out << bar("req/s at #{conns} connections >= 1.15x Iodine", m && i && m["rps_median"] / i["rps_median"], ">= 1.15") { |v| v >= 1.15 }
        out << bar("req/s at #{conns} connections >= 0.8x nginx", m && n && m["rps_median"] / n["rps_median"], ">= 0.8") { |v| v >= 0.8 }
        out << bar("server CPU per request at #{conns} connections <= 15 µs", m && m["server_cpu_us_per_request_median"],
                   "<= 15 µs") { |v| v <= 15 }
      end
      w = at.call("margay-w2")
      nw = at.call("nginx-w2")
      out << bar("2-worker cluster req/s at 64 connections >= 0.9x nginx (2 workers)",
                 w && nw && w["rps_median"] / nw["rps_median"], ">= 0.9") { |v| v >= 0.9 }
    end

    def bar(name, value, target)
      met = value.nil? ? nil : yield(*Array(value))
      shown = case value
              when nil then "n/a"
              when Array then value.map { |v| v.round(2) }.join(" vs ")
              else value.round(3)
              end
      { "bar" => name, "target" => target, "value" => shown, "met" => met }
    end

    def header
      m = @result["machine"]
      v = @result["versions"]
      ["## Core benchmark (#{@result['mode']}) — #{@result['started_at']}", "",
       "Machine: #{m['nproc']} CPUs (#{m['cpu_model']}), Linux #{m['kernel']}, load average at start #{m['loadavg']}. " \
       "#{v['ruby']}. Margay #{v['margay']} (#{v['margay_commit']}), Iodine #{v['iodine']}, Puma #{v['puma']}, " \
       "#{v['nginx']}, #{v['wrk']}."]
    end

    def hello(lines)
      h = @result["hello"]
      c = @result["config"]
      v = @result["versions"]
      lines << ""
      lines << "### Hello world (keep-alive, `wrk -t#{c['wrk_threads']} -c<N> -d#{c['duration_s']}s --timeout " \
               "#{c['wrk_timeout_s']}s --latency -s bench/wrk/report.lua`, median of #{c['rounds']} round(s))"
      lines << ""
      lines << "Margay threads: #{h['margay_threads'] == 'default' ? "default (#{v['margay_default_threads']})" : h['margay_threads']}; " \
               "Iodine: `-t 1 -w 1`; Puma: single mode, default threads (#{v['puma_default_threads']}); nginx: 1 worker; " \
               "margay-w2 and nginx-w2: 2 workers (their \"vs nginx\" is vs nginx-w2)."
      lines << ""
      lines << "| conns | server | req/s | vs nginx | vs Iodine | vs Puma | p50 | p90 | p99 | non-2xx | socket errors | " \
               "RSS after (MiB) | server CPU µs/req |"
      lines << "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      h["summary"].each do |r|
        lines << "| #{r['connections']} | #{r['server']} | #{r['rps_median'].round} | #{ratio(r['rps_vs_nginx'])} | " \
                 "#{ratio(r['rps_vs_iodine'])} | " \
                 "#{ratio(r['rps_vs_puma'])} | #{Stats.ms(r['p50_ms'])} | #{Stats.ms(r['p90_ms'])} | #{Stats.ms(r['p99_ms'])} | " \
                 "#{r['non2xx']} | #{r['socket_errors']} | #{r['rss_mib_median']} | #{r['server_cpu_us_per_request_median']} |"
      end
      lines << "| – | (no results) ||||||||||||" if h["summary"].empty?
      lines << ""
      noise(lines, h["runs"])
    end

    def noise(lines, runs)
      noisy = runs.select { |r| r["other_cpu_pct"].to_f > NOISY_PCT }
      if runs.empty?
        nil
      elsif noisy.empty?
        lines << "Other processes used at most #{runs.map { |r| r['other_cpu_pct'] }.max}% of the CPUs during any run."
      else
        lines << "**Noisy:** #{noisy.size} of #{runs.size} runs had other processes using > #{NOISY_PCT}% of the " \
                 "CPUs (max #{noisy.map { |r| r['other_cpu_pct'] }.max}%); treat the figures with care."
      end
    end

    def slow(lines)
      s = @result["slow"]
      c = @result["config"]
      lines << ""
      lines << "### Slow clients (1 thread; #{c['slow_trickle']} trickling at 1 byte/s, #{c['slow_non_readers']} " \
               "non-reading 16 MiB downloads; sequential GET / for #{c['slow_duration_s']}s, " \
               "#{c['slow_request_timeout_s']}s timeout per request)"
      lines << ""
      lines << "| server | threads | requests | ok | errors | p50 | p90 | p99 | max | trickling still open | non-readers with data | RSS after (MiB) |"
      lines << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      lines << "| (no results) ||||||||||||" if s["summary"].empty?
      s["summary"].each do |r|
        lines << "| #{r['server']} | #{r['threads']} | #{r['requests']} | #{r['ok']} | #{r['errors']} | #{Stats.ms(r['p50_ms'])} | " \
                 "#{Stats.ms(r['p90_ms'])} | #{Stats.ms(r['p99_ms'])} | #{Stats.ms(r['max_ms'])} | " \
                 "#{r['trickle_open_at_end']}/#{r['trickle_opened']} | #{r['non_readers_receiving']}/#{r['non_readers_opened']} | " \
                 "#{r['rss_mib_max']} |"
      end
    end

    # With --baseline: margay / margay-base for each figure of the two tables above.
    def baseline(lines)
      b = @result["baseline"]
      lines << ""
      lines << "### Margay vs margay-base (#{b['dir']}, Margay #{b['margay']} (#{b['commit']}))"
      lines << ""
      lines << "Ratios margay / margay-base of the medians above: req/s (slow clients: requests completed) above 1.00x " \
               "is faster, latency, CPU and RSS below 1.00x are lower. Both ran in the same rotation, so they share " \
               "the machine's drift; differences of a few percent are within noise."
      lines << ""
      lines << "| scenario | req/s | p50 | p90 | p99 | server CPU µs/req | RSS |"
      lines << "|---|---:|---:|---:|---:|---:|---:|"
      b["ratios"].each do |r|
        lines << "| #{r['scenario']} | #{ratio(r['rps'])} | #{ratio(r['p50'])} | #{ratio(r['p90'])} | #{ratio(r['p99'])} | " \
                 "#{ratio(r['cpu_us_per_request'])} | #{ratio(r['rss'])} |"
      end
      lines << "| (no pair of results) |||||||" if b["ratios"].empty?
    end

    def bars_table(lines)
      lines << ""
      lines << "### Bars"
      lines << ""
      lines << "| bar | target | measured | met |"
      lines << "|---|---|---|---|"
      @result["bars"].each do |b|
        met = { true => "yes", false => "**no**", nil => "n/a" }[b["met"]]
        lines << "| #{b['bar']} | #{b['target']} | #{b['value']} | #{met} |"
      end
    end

    def failures(lines)
      return if @result["failures"].empty?

      lines << ""
      lines << "### Failures"
      lines << ""
      @result["failures"].each do |f|
        where = [f["scenario"], f["connections"] && "#{f['connections']} connections"].compact.join(", ")
        lines << "- #{f['server']} (#{where}): #{f['error']}"
      end
    end

    def ratio(v)
      v.nil? ? "" : format("%.2fx", v)
    end
  end
end
