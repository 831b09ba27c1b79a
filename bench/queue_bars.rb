#!/usr/bin/env ruby
# frozen_string_literal: true

# Every bar of the cluster queue in one run: each load below is one bench/queue.rb run
# (Margay and Puma 8 alternated round by round, the order rotating), then each round is held
# against its bar and the summary says how many rounds met it.
#
#   id            load                                             bar, per round
#   ab-io         ab -n 3000 -c 50, 2 workers, the io app         p99 <= 0.9x Puma's at >= 1.0x its req/s
#   ab-rails      the same, the Rails bench app                    the same
#   wrk-W-C       wrk -cC keep-alive, W workers, the io app        p99 <= 1.0x Puma's at >= 0.95x its req/s,
#   wrk-rails-W-C the same, the Rails bench app                    and p99 <= 1.25x Margay's own mean
#   fibers-2-256  wrk -c256, 2 workers, Margay in fiber mode       the same
#   arrival       open loop, 2 workers, the Rails app              capacity (p99 <= 100 ms) >= 1.2x Puma's
#   hello         wrk -c256, 2 workers, hello world, --baseline    req/s >= 0.95x the baseline tree's
#                 (only with --baseline DIR: another Margay checkout, e.g. the tree before a change)
#
#   bundle exec ruby bench/queue_bars.rb [--only ID,ID] [--rounds N] [--baseline DIR] [--results-dir DIR]
#
# --rounds sets the rounds of every load but ab-io (5) and arrival (2); default 3. Each
# bench/queue.rb run writes its own queue-<load>-<time>.json and .md into the results dir;
# this script adds queue-bars-<time>.md and .json: per bar every round's figures and the count met.
require "optparse"
require_relative "queue"

module MargayBench
  class QueueBars
    WRK_LOADS = [[2, 64], [2, 256], [4, 64], [4, 256]].freeze

    Bar = Struct.new(:id, :argv, :kind, :rounds, keyword_init: true)

    def initialize(argv)
      @o = { rounds: 3, only: nil, baseline: nil,
             results_dir: File.join(ROOT, "bench/results", "queue-#{Time.now.utc.strftime('%Y%m%d')}") }
      OptionParser.new do |p|
        p.on("--only IDS", Array) { |v| @o[:only] = v }
        p.on("--rounds N", Integer) { |v| @o[:rounds] = v }
        p.on("--baseline DIR") { |v| @o[:baseline] = File.expand_path(v) }
        p.on("--results-dir DIR") { |v| @o[:results_dir] = File.expand_path(v) }
      end.parse!(argv)
      unknown = (@o[:only] || []) - bars.map(&:id)
      abort "bench/queue_bars.rb: no bar #{unknown.join(', ')} (bars: #{bars.map(&:id).join(', ')})" unless unknown.empty?
    end

    def bars
      n = @o[:rounds]
      list = [Bar.new(id: "ab-io", argv: %w[--load ab --rounds 5], kind: :ab),
              Bar.new(id: "ab-rails", argv: %W[--load ab --rounds #{n} --rails], kind: :ab)]
      WRK_LOADS.each do |workers, conns|
        wrk = %W[--load wrk --workers #{workers} --connections #{conns} --rounds #{n}]
        list << Bar.new(id: "wrk-#{workers}-#{conns}", argv: wrk, kind: :closed)
        list << Bar.new(id: "wrk-rails-#{workers}-#{conns}", argv: wrk + %w[--rails], kind: :closed)
      end
      list << Bar.new(id: "fibers-2-256", argv: %W[--load wrk --connections 256 --rounds #{n} --fibers], kind: :closed)
      list << Bar.new(id: "arrival", argv: %w[--load arrival --rounds 2 --rails --max-rate 400 --probes 7 --seconds 5],
                      kind: :open)
      if @o[:baseline]
        list << Bar.new(id: "hello", argv: %W[--load wrk --connections 256 --rounds #{[n, 2].min} --app bench/apps/hello.ru
                                              --baseline #{@o[:baseline]}], kind: :baseline)
      end
      list
    end

    def run
      chosen = bars.select { |b| @o[:only].nil? || @o[:only].include?(b.id) }
      results = chosen.map do |bar|
        warn "[queue-bars] #{Time.now.utc.strftime('%T')} #{bar.id}: bench/queue.rb #{bar.argv.join(' ')}"
        bench = QueueBench.new(bar.argv + ["--results-dir", @o[:results_dir]])
        bench.run
        { "id" => bar.id, "argv" => bar.argv, "rounds" => judge(bar.kind, bench.rows) }
      end
      ResultFiles.write("queue-bars", @o, results, markdown(chosen, results))
      0
    end

    private

    # Per round: the figures the bar looks at and whether they meet it.
    def judge(kind, rows)
      rows.group_by { |r| r["round"] }.sort.map do |round, rs|
        m = rs.find { |r| r["server"] == "margay" }
        other = rs.find { |r| r["server"] == (kind == :baseline ? "margay-base" : "puma") }
        send(:"judge_#{kind}", m, other).merge("round" => round)
      end
    end

    def judge_ab(m, puma)
      p99 = m["p99_ms"] / puma["p99_ms"]
      rps = m["rps"] / puma["rps"]
      { "p99_x" => p99, "rps_x" => rps, "met" => p99 <= 0.9 && rps >= 1.0 }
    end

    def judge_closed(m, puma)
      p99 = m["p99_ms"] / puma["p99_ms"]
      rps = m["rps"] / puma["rps"]
      own = m["p99_ms"] / m["mean_ms"]
      { "p99_x" => p99, "rps_x" => rps, "p99_over_mean" => own, "met" => p99 <= 1.0 && rps >= 0.95 && own <= 1.25 }
    end

    def judge_open(m, puma)
      return { "capacity_x" => nil, "met" => m["rps"].positive? } unless puma["rps"].positive? # Puma met no probe

      cap = m["rps"].fdiv(puma["rps"])
      { "capacity_x" => cap, "met" => cap >= 1.2 }
    end

    def judge_baseline(m, base)
      rps = m["rps"] / base["rps"]
      { "rps_x" => rps, "met" => rps >= 0.95 }
    end

    def markdown(chosen, results)
      lines = ["Cluster queue bars (bench/queue_bars.rb), per round Margay against Puma 8 " \
               "(hello: against the baseline tree)", "",
               "| bar | load | rounds met | per round |", "|---|---|---:|---|"]
      chosen.zip(results).each do |bar, res|
        rounds = res["rounds"]
        lines << format("| %s | `%s` | %d of %d | %s |", bar.id, bar.argv.join(" "), rounds.count { |r| r["met"] },
                        rounds.size, rounds.map { |r| round_text(r) }.join("; "))
      end
      "#{lines.join("\n")}\n"
    end

    def round_text(r)
      figures = []
      figures << format("p99 %.2fx", r["p99_x"]) if r["p99_x"]
      figures << format("req/s %.2fx", r["rps_x"]) if r["rps_x"]
      figures << format("p99/mean %.2f", r["p99_over_mean"]) if r["p99_over_mean"]
      figures << format("capacity %.2fx", r["capacity_x"]) if r["capacity_x"]
      "#{figures.join(' ')}#{r['met'] ? '' : ' (not met)'}"
    end
  end
end

exit MargayBench::QueueBars.new(ARGV).run if $PROGRAM_NAME == __FILE__
