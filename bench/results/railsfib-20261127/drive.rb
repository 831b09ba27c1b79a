# frozen_string_literal: true

# railsfib driver: PostgreSQL + slow service (bench's WaitingBackends), then per concurrency a
# fresh `margay --fibers` on the Rails app (the rails bar's command and env), a warm-up, a long
# measured wrk run (server CPU from /proc before/after; the probe logs the server side), and
# optionally a perf record during a further run.
#   ruby /tmp/railsfib/drive.rb OUTDIR C1,C2 MEASURE_S [perf]
require "json"
require "tmpdir"
ROOT_DIR = "/work/wt/railsfib"
Dir.chdir(ROOT_DIR)
require_relative "#{ROOT_DIR}/bench/lib/harness"
require_relative "#{ROOT_DIR}/bench/lib/wrk"
require_relative "#{ROOT_DIR}/bench/lib/waiting/backends"
require_relative "#{ROOT_DIR}/bench/lib/waiting/servers"
include MargayBench

out, concs, secs, perf = ARGV
concs = concs.split(",").map(&:to_i)
secs = Integer(secs)
pool = Integer(ENV.fetch("RF_POOL", "64"))
extra_env = ENV.select { |k, _| k.start_with?("RF_ENV_") }.to_h { |k, v| [k.delete_prefix("RF_ENV_"), v] }
FileUtils.mkdir_p(out)
log = ->(s) { line = "#{Time.now.utc.strftime('%H:%M:%S')} #{s}"; puts line; File.open(File.join(out, "drive.log"), "a") { |f| f.puts line } }
tmp = Dir.mktmpdir("railsfib-")
env = Env.clean.merge("BUNDLE_GEMFILE" => File.join(ROOT_DIR, "bench/Gemfile"), "RACK_ENV" => "production",
                      "RAILS_ENV" => "production", "APP_ENV" => "production")
backends = WaitingBackends.new(tmp: tmp, env: env, progress: log, pool: pool).start(slow: true)
results = []
begin
  concs.each do |c|
    port = Env.free_port
    argv, = WaitingServers.command("margay-fibers", port: port, app: "bench/apps/rails/config.ru", workers: 1,
                                                    margay_dir: ROOT_DIR)
    argv.insert(-2, *ENV["RF_ARGS"].split) if ENV["RF_ARGS"]
    senv = env.merge(backends.env(fibers: true)).merge(extra_env)
    pid = Process.spawn(senv, *argv, chdir: ROOT_DIR, unsetenv_others: true, pgroup: true, in: File::NULL,
                                     %i[out err] => [File.join(out, "server-c#{c}.log"), "w"])
    deadline = Procs.now + 60
    sleep 0.5 until ((Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/slow")).code == "200" rescue false) || Procs.now > deadline)
    log.call("c=#{c}: server pid #{pid} (#{argv.join(' ')}) env #{extra_env}")
    url = "http://127.0.0.1:#{port}/slow"
    wrk = ->(s) { Wrk.run(Wrk.argv(threads: 2, connections: c, seconds: s, timeout: 10, url: url), out_path: File.join(tmp, "wrk.out"), bound: s + 40).first }
    wrk.call(5)
    sleep 4 # the warm-up's abandoned requests finish
    cpu0 = Procs.cpu_s(pid); h0 = backends.cpu_s; t0 = Procs.now
    log.call("c=#{c}: measure #{secs}s start mono=#{Process.clock_gettime(Process::CLOCK_MONOTONIC).round(3)}")
    d = wrk.call(secs)
    t1 = Procs.now; cpu1 = Procs.cpu_s(pid); h1 = backends.cpu_s
    log.call("c=#{c}: measure end mono=#{Process.clock_gettime(Process::CLOCK_MONOTONIC).round(3)}")
    r = { "c" => c, "requests" => d["requests"], "secs" => (t1 - t0).round(2), "rps" => (d["requests"] / (t1 - t0)).round(1),
          "server_cpu_s" => (cpu1 - cpu0).round(2), "us_per_req_wrk" => ((cpu1 - cpu0) * 1e6 / d["requests"]).round,
          "p50_ms" => d["latency_us"]["p50"] / 1000.0, "p99_ms" => d["latency_us"]["p99"] / 1000.0,
          "errors" => d["errors"], "pg_pct" => (100 * (h1["postgres"] - h0["postgres"]) / (t1 - t0)).round(1),
          "slow_pct" => (100 * (h1["slow_service"] - h0["slow_service"]) / (t1 - t0)).round(1), "pid" => pid }
    log.call("c=#{c}: #{r.to_json}")
    results << r
    if perf
      th = Thread.new { wrk.call(14) }
      sleep 3
      system("perf", "record", "-F", "499", "-g", "-p", pid.to_s, "-o", File.join(out, "perf-c#{c}.data"), "--", "sleep", "8",
             out: File.join(out, "perf-c#{c}.rec.log"), err: %i[child out])
      th.join
      log.call("c=#{c}: perf recorded")
    end
    Procs.stop(pid, grace: 5)
  end
ensure
  backends.stop
  FileUtils.rm_rf(tmp)
  File.write(File.join(out, "results.json"), JSON.pretty_generate(results))
end
