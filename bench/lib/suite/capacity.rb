# frozen_string_literal: true

require "json"
require "rbconfig"
require_relative "../procs"
require_relative "../stats"
require_relative "options"

module MargayBench
  # Capacity under the SLO, part of bench/run.rb's Suite (included there): the highest
  # fixed arrival rate whose p99 stays under the SLO, probed with bench/lib/arrival.rb
  # against the session's server. Uses the Suite's options (@o), tmp dir (@tmp),
  # failures (@failures) and #progress, and sets @load_pid while a probe runs.
  module SuiteCapacity
    # The first probe runs at the best closed-loop req/s of this session (capped at the
    # client's limit); if it misses, the rate is bisected between the highest rate that met
    # the SLO so far (0 at first) and the lowest that missed, for --slo-probes probes in all.
    # Every server gets the same number of probes and the same relative resolution (1/16 of
    # its best with 5 probes), and a server whose closed-loop best is high is not charged for
    # it: a miss at a high rate only moves the search down.
    PROBE_SETTLE = 1.0

    def capacity(inst, wl, spec, runs, rep)
      best = runs.map { |r| r["rps"] }.max
      return [] unless best&.positive?

      top = [best.round, @o.slo_max_rate].min
      met_rate = 0
      missed_rate = nil
      probes = []
      @o.slo_probes.times do
        rate = missed_rate ? ((met_rate + missed_rate) / 2.0).round : top
        break if rate <= met_rate || rate <= 0 || probes.any? { |p| p["rate"] == rate }

        sleep PROBE_SETTLE unless probes.empty? # let the server drain what an overloaded probe left queued
        probe = arrival_probe(inst, wl, spec, rate, rep, best)
        break unless probe

        probes << probe
        break if probe["met"] && rate == top

        probe["met"] ? met_rate = rate : missed_rate = rate
      end
      probes
    end

    # One open-model run of bench/lib/arrival.rb at +rate+; the probe's record, or nil if
    # the client failed.
    def arrival_probe(inst, wl, spec, rate, rep, best)
      argv = [RbConfig.ruby, "bench/lib/arrival.rb", "--port", inst.port.to_s, "--path", spec[:path],
              "--rate", rate.to_s, "--duration", @o.slo_duration.to_s, "--connections", "256",
              "--timeout", "5", "--json"]
      out_path = File.join(@tmp, "arrival.out")
      pid = @load_pid = Process.spawn(Env.clean, *argv, chdir: ROOT, unsetenv_others: true, in: File::NULL,
                                                        out: [out_path, "w"], err: [File.join(@tmp, "arrival.err"), "w"])
      status = Procs.wait(pid, @o.slo_duration + 30)
      @load_pid = nil
      Procs.stop(pid, grace: 2) unless status
      data = status&.success? ? JSON.parse(File.read(out_path)) : nil
      unless data
        @failures << { "server" => inst.name, "workload" => wl, "error" => "arrival.rb failed at #{rate}/s",
                       "stderr" => File.read(File.join(@tmp, "arrival.err"))[-2000..] }
        return nil
      end
      p99 = data.dig("latency_ms", "p99")
      met = data["errors"].zero? && data["dropped"].zero? && p99 && p99 <= @o.slo_p99_ms &&
            data["achieved_rate"] >= 0.95 * rate
      progress format("  %-9s %-9s open model %5d/s: achieved %.0f/s, p99 %s, errors %d, dropped %d -> %s",
                      inst.name, wl, rate, data["achieved_rate"], Stats.ms(p99), data["errors"], data["dropped"],
                      met ? "meets SLO" : "misses SLO")
      { "server" => inst.name, "workload" => wl, "repeat" => rep, "rate" => rate, "met" => met,
        "capped" => rate == @o.slo_max_rate, "best_closed_loop_rps" => best,
        "command" => argv.drop(1).join(" ").sub(/--port \d+/, "--port PORT") }.merge(data)
    end

    # Per repeat: the highest probed rate that met the SLO (0 if even the first missed);
    # median over repeats.
    def summarize_capacity(probes)
      probes.group_by { |p| [p["workload"], p["server"]] }.map do |(wl, server), ps|
        per_rep = ps.group_by { |p| p["repeat"] }.transform_values do |rp|
          rp.select { |p| p["met"] }.map { |p| p["rate"] }.max || 0
        end
        capped = ps.any? { |p| p["met"] && p["capped"] }
        all_met = ps.group_by { |p| p["repeat"] }.values.all? { |rp| rp.all? { |p| p["met"] } }
        {
          "workload" => wl, "server" => server, "slo_p99_ms" => @o.slo_p99_ms,
          "capacity_rps_median" => Stats.median(per_rep.values), "capacity_rps_per_repeat" => per_rep.values,
          "capped_by_client" => capped, "all_probes_met" => all_met
        }
      end.sort_by { |r| [WORKLOADS.keys.index(r["workload"]), SuiteServers::ALL.index(r["server"])] }
    end
  end
end
