# frozen_string_literal: true

require "fileutils"
require_relative "../svg"
require_relative "servers"

module MargayBench
  # The SVG charts of one bench/run.rb result (docs/charts/suite-*.svg).
  class SuiteCharts
    def initialize(result, dir)
      @r = result
      @dir = dir
      order = SuiteServers::ALL
      @servers = (@r["servers_run"] || []).sort_by { |s| order.index(s) }
      @color = @servers.each_with_index.to_h { |s, i| [s, Svg::PALETTE[i % Svg::PALETTE.size]] }
    end

    def write_all
      files = []
      rows = @r["summary"]
      rows.map { |x| x["workload"] }.uniq.each do |wl|
        wr = rows.select { |x| x["workload"] == wl }
        files << put("suite-#{wl}-throughput.svg", Svg.line_chart(
          title: "#{wl}: throughput vs concurrency (median of #{@r.dig('config', 'repeats')})",
          xlabel: "concurrent connections (wrk -c)", ylabel: "requests/s",
          series: series(wr, "rps_median")
        ))
        lat = series(wr, "p99_ms").map { |s| s.merge(name: "#{s[:name]} p99") } +
              series(wr, "p50_ms").map { |s| s.merge(name: "#{s[:name]} p50", dash: true) }
        files << put("suite-#{wl}-latency.svg", Svg.line_chart(
          title: "#{wl}: latency vs concurrency (solid p99, dashed p50; log scale)",
          xlabel: "concurrent connections (wrk -c)", ylabel: "latency (ms)", series: lat, ylog: true, width: 820
        ))
      end
      files << put("suite-memory.svg", memory_chart(rows))
      files << put("suite-capacity.svg", capacity_chart) unless (@r["capacity"] || []).empty?
      files
    end

    private

    def series(rows, key)
      @servers.filter_map do |s|
        pts = rows.select { |x| x["server"] == s }.sort_by { |x| x["concurrency"] }.map { |x| [x["concurrency"], x[key]] }
        next if pts.empty?

        { name: s, points: pts, color: @color[s], bold: s == "margay" }
      end
    end

    # Peak PSS of all server processes (median over repeats), per server, at the highest
    # concurrency of each workload.
    def memory_chart(rows)
      wls = rows.map { |x| x["workload"] }.uniq
      top = rows.map { |x| x["concurrency"] }.max
      groups = @servers.map do |s|
        { name: s, values: wls.to_h { |w| [w, rows.find { |x| x["server"] == s && x["workload"] == w && x["concurrency"] == top }&.dig("pss_mib")] }.compact }
      end
      Svg.bar_chart(title: "Memory: peak PSS of all server processes at c=#{top} (MiB)",
                    xlabel: "MiB (PSS, sum over master + workers)", groups: groups, series: wls)
    end

    def capacity_chart
      cap = @r["capacity"]
      wls = cap.map { |c| c["workload"] }.uniq
      groups = wls.map do |w|
        { name: w, values: @servers.to_h { |s| [s, cap.find { |c| c["server"] == s && c["workload"] == w }&.dig("capacity_rps_median")] }.compact }
      end
      Svg.bar_chart(title: "Capacity: highest arrival rate with p99 <= #{@r.dig('config', 'slo_p99_ms')} ms (req/s)",
                    xlabel: "requests/s (open model, bench/lib/arrival.rb)", groups: groups, series: @servers)
    end

    def put(name, svg)
      path = File.join(@dir, name)
      File.write(path, svg)
      path
    end
  end
end
