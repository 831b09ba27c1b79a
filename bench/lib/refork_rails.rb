# frozen_string_literal: true

require "json"
require "fileutils"
require "optparse"
require "net/http"
require_relative "procs"
require_relative "servers"
require_relative "wrk"

module MargayBench
  # bench/refork.rb rails: memory of a 4-worker cluster serving the Rails bench app,
  # before and after a refork, side by side with Puma 8 (--preload, and --fork-worker=0
  # reforked by URG). Every server gets the same load (wrk, 2 threads, 16 connections).
  module ReforkRails
    APP = "bench/apps/rails/config.ru"
    WORKERS = 4
    THREADS = 5
    CONNECTIONS = 16

    module_function

    def main(argv)
      opts = { seconds: 15, warm: 20, servers: %w[margay puma-preload puma-fork], growth: 0,
               out: File.join(ROOT, "bench/results/tmp/refork-rails-#{Time.now.utc.strftime('%Y%m%dT%H%M%SZ')}") }
      OptionParser.new do |o|
        o.on("--seconds S", Integer, "load after the refork (and each load window)") { |v| opts[:seconds] = v }
        o.on("--warm S", Integer, "warm-up load (not reported), then S (--seconds) measured before the refork") do |v|
          opts[:warm] = v
        end
        o.on("--servers LIST", Array, "margay, margay+ENV=V[+C=config.rb], margay-lazy+C=config.rb, puma-preload, puma-fork") do |v|
          opts[:servers] = v
        end
        o.on("--growth MIN", Integer, "then MIN minutes of load, PSS each minute") { |v| opts[:growth] = v }
        o.on("--out DIR", "raw outputs here") { |v| opts[:out] = File.expand_path(v) }
      end.parse!(argv)
      FileUtils.mkdir_p(opts[:out])
      results = opts[:servers].map { |name| run_one(name, opts) }
      File.write(File.join(opts[:out], "results.json"), JSON.pretty_generate(results))
      puts report(results)
      File.write(File.join(opts[:out], "report.md"), report(results))
      0
    end

    # [argv, env] of +name+ on +port+.
    def command(name, port)
      base, *extras = name.split("+")
      env = {}
      args = []
      extras.each do |kv|
        key, value = kv.split("=", 2)
        key == "C" ? args.push("-C", File.expand_path(value, ROOT)) : env[key] = value
      end
      common = { workers: WORKERS, threads: "#{THREADS}:#{THREADS}" }
      argv = case base
             when "margay" then Servers.margay(port, APP, **common, extra: ["--preload", *args])
             when "margay-lazy" then Servers.margay(port, APP, **common, extra: args) # with C=a config saying preload_app false
             when "puma-preload" then Servers.puma(port, APP, **common, extra: %w[--preload])
             when "puma-fork" then Servers.puma(port, APP, **common, extra: %w[--fork-worker=0])
             else raise ArgumentError, "unknown server #{name}"
             end
      [argv, env]
    end

    def reforks?(name)
      !name.start_with?("puma-preload")
    end

    def run_one(name, opts)
      port = Env.free_port
      argv, extra = command(name, port)
      log = File.join(opts[:out], "#{name.tr('/=+', '__-')}.log")
      env = Env.clean.merge("BUNDLE_GEMFILE" => File.join(ROOT, "bench/Gemfile")).merge(extra)
      warn "== #{name}: #{argv.join(' ')} #{extra.map { |k, v| "#{k}=#{v}" }.join(' ')}"
      pid = Process.spawn(env, *argv, chdir: ROOT, unsetenv_others: true, pgroup: true, in: File::NULL,
                                      %i[out err] => [log, "w"])
      result = { "server" => name, "command" => argv.join(" "), "env" => extra }
      wait_ready(pid, port)
      url = "http://127.0.0.1:#{port}/"
      result["warm_up"] = load(url, opts[:warm], opts[:out], "#{name}-warm-up")
      result["warm"] = load(url, opts[:seconds], opts[:out], "#{name}-before")
      sleep 2
      result["pss_warm"] = memory(pid)
      if reforks?(name)
        before = workers(pid)
        Process.kill(:URG, pid)
        result["refork_s"] = wait_refork(pid, before)
        sleep 2
        result["pss_reforked_idle"] = memory(pid)
      end
      result["after"] = load(url, opts[:seconds], opts[:out], "#{name}-after")
      sleep 2
      result["pss_after"] = memory(pid)
      result["growth"] = growth(pid, url, opts, name) if opts[:growth].positive?
      result
    ensure
      stop(pid) if pid
    end

    def growth(pid, url, opts, name)
      (1..opts[:growth]).map do |minute|
        run = load(url, 60, opts[:out], "#{name}-growth-#{minute}")
        sleep 1
        { "minute" => minute, "pss" => memory(pid), "load" => run }
      end
    end

    def wait_ready(pid, port)
      deadline = Procs.now + 90
      until Procs.now > deadline
        raise "the server exited during start-up" unless Procs.alive?(pid)

        begin
          res = Net::HTTP.start("127.0.0.1", port, open_timeout: 1, read_timeout: 10) { |h| h.get("/") }
          return if res.code == "200"
        rescue SystemCallError, IOError, Net::OpenTimeout, Net::ReadTimeout, EOFError
          nil
        end
        sleep 0.2
      end
      raise "no 200 within 90 s"
    end

    # The master's descendants: pid => command line.
    def workers(pid)
      Procs.tree(pid).drop(1).to_h { |p| [p, cmdline(p)] }
    end

    def cmdline(pid)
      File.read("/proc/#{pid}/cmdline").tr("\0", " ").strip
    rescue SystemCallError
      ""
    end

    # Until WORKERS serving processes are there and at most one of the old ones
    # (Puma's worker 0, or a mold) is among them; seconds it took.
    def wait_refork(pid, before)
      t0 = Procs.now
      loop do
        now = workers(pid)
        fresh = now.keys - before.keys
        kept = now.keys & before.keys
        return (Procs.now - t0).round(1) if fresh.size >= WORKERS - 1 && kept.size <= 1 && fresh.size + kept.size >= WORKERS
        raise "no refork within 120 s: #{now}" if Procs.now - t0 > 120

        sleep 0.2
      end
    end

    def memory(pid)
      sample = Memory.sample(pid)
      sample["processes"].each do |p|
        p["cmdline"] = cmdline(p["pid"])[0, 60]
        p["by_kind_kib"] = memory_by_kind(p["pid"])
      end
      sample
    end

    ARENA_ALIGN = 64 << 20 # glibc's HEAP_MAX_SIZE on 64-bit: each non-main arena's heap starts so aligned

    # One process's memory by kind of mapping (/proc/PID/smaps), each kind's Pss,
    # Private_Dirty and Shared (clean + dirty) in KiB: "brk heap" (malloc's main
    # arena), "malloc arenas" (the other arenas: anonymous, 64 MiB-aligned),
    # "thread stacks" (anonymous, just above a PROT_NONE guard), "anon other"
    # (Ruby's heap pages, mmapped 64 KiB each on Ruby 3.1, and malloc's large
    # blocks), "so" (shared objects), "file" (other files), "[stack]".
    def memory_by_kind(pid)
      vmas = smaps(pid)
      kinds = Hash.new { |h, k| h[k] = { "pss" => 0, "private_dirty" => 0, "shared" => 0 } }
      vmas.each_with_index do |v, i|
        k = kinds[mapping_kind(v, i.zero? ? nil : vmas[i - 1])]
        k["pss"] += v["Pss"]
        k["private_dirty"] += v["Private_Dirty"]
        k["shared"] += v["Shared_Clean"] + v["Shared_Dirty"]
      end
      kinds
    rescue SystemCallError
      {}
    end

    def mapping_kind(vma, before)
      name = vma["name"]
      return name == "[heap]" ? "brk heap" : name if name&.start_with?("[")
      return name.include?(".so") ? "so" : "file" if name

      if (vma["start"] % ARENA_ALIGN).zero? && vma["end"] - vma["start"] <= ARENA_ALIGN then "malloc arenas"
      elsif before && before["name"].nil? && before["perms"].start_with?("---") && before["end"] == vma["start"] &&
            before["end"] - before["start"] <= 65_536 then "thread stacks"
      else "anon other"
      end
    end

    def smaps(pid)
      vmas = []
      File.foreach("/proc/#{pid}/smaps") do |line|
        if (m = line.match(/\A(\h+)-(\h+) (\S+) \S+ \S+ \S+\s*(.*)$/))
          vmas << Hash.new(0).merge("start" => m[1].hex, "end" => m[2].hex, "perms" => m[3],
                                    "name" => m[4].empty? ? nil : m[4])
        elsif (m = line.match(/\A(Pss|Private_Dirty|Shared_Clean|Shared_Dirty):\s+(\d+) kB/))
          vmas.last[m[1]] = m[2].to_i
        end
      end
      vmas
    end

    # Mean of the workers' and the master's breakdowns in one sample, as table lines.
    def breakdown_lines(result, key)
      procs = result[key]["processes"]
      master, *workers = procs
      kinds = procs.flat_map { |p| p["by_kind_kib"].keys }.uniq.sort
      mean = lambda do |list, kind, field|
        (list.sum { |p| p["by_kind_kib"].dig(kind, field) || 0 } / list.size.to_f / 1024).round(1)
      end
      lines = ["#{result['server']} (#{key}), MiB: kind | master PSS / private dirty | mean worker PSS / private dirty / shared",
               "|---|---:|---:|"]
      kinds.each do |kind|
        lines << "| #{kind} | #{mean.([master], kind, 'pss')} / #{mean.([master], kind, 'private_dirty')} | " \
                 "#{mean.(workers, kind, 'pss')} / #{mean.(workers, kind, 'private_dirty')} / #{mean.(workers, kind, 'shared')} |"
      end
      lines
    end

    def load(url, seconds, out, tag)
      argv = Wrk.argv(threads: 2, connections: CONNECTIONS, seconds: seconds, timeout: 10, url: url)
      json, = Wrk.run(argv, out_path: File.join(out, "#{tag.tr('/=+', '__-')}.wrk.txt"), bound: seconds + 30)
      { "rps" => (json["requests"] / (json["duration_us"] / 1e6)).round(1), "p99_ms" => json["latency_us"]["p99"] / 1000.0,
        "p50_ms" => json["latency_us"]["p50"] / 1000.0, "errors" => json["errors"].values.sum, "requests" => json["requests"] }
    end

    def stop(pid)
      Procs.stop(pid)
      Process.kill(:KILL, -pid)
    rescue Errno::ESRCH, Errno::EPERM
      nil
    end

    def mib(kib)
      kib ? (kib / 1024.0).round(1) : "-"
    end

    def report(results)
      lines = ["| server | PSS warm (procs) | PSS after refork + load (procs) | req/s before → after | p99 ms before → after |",
               "|---|---:|---:|---:|---:|"]
      results.each do |r|
        lines << "| #{r['server']} | #{mib(r['pss_warm']['pss_kib'])} (#{r['pss_warm']['processes'].size}) | " \
                 "#{mib(r['pss_after']['pss_kib'])} (#{r['pss_after']['processes'].size}) | " \
                 "#{r['warm']['rps']} → #{r['after']['rps']} | #{r['warm']['p99_ms']} → #{r['after']['p99_ms']} |"
      end
      lines << ""
      results.each do |r|
        lines << "#{r['server']} after (MiB PSS / RSS): " +
                 r["pss_after"]["processes"].map { |p| "#{p['cmdline'][0, 28]} #{mib(p['pss_kib'])}/#{mib(p['rss_kib'])}" }.join("; ")
        next unless r["growth"]

        lines << "  growth (total PSS MiB per minute): " + r["growth"].map { |g| mib(g["pss"]["pss_kib"]) }.join(", ")
      end
      results.each { |r| lines.push("", *breakdown_lines(r, "pss_after")) }
      lines.join("\n")
    end
  end
end
