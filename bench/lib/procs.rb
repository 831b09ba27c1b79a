# frozen_string_literal: true

# Shared by the bench scripts: process trees, RSS/PSS/CPU readings from /proc, bounded
# waits, stopping (TERM, then KILL), the CPU accounting of a measured run, and a clean
# environment for child processes.
require "etc"
require "socket"
require_relative "stats"

module MargayBench
  ROOT = File.expand_path("../..", __dir__) # the checkout these scripts belong to
  BENCH = File.join(ROOT, "bench")

  # Process helpers: descendants, RSS, bounded waits, stopping.
  module Procs
    module_function

    def children_map
      map = Hash.new { |h, k| h[k] = [] }
      Dir.glob("/proc/[0-9]*/stat").each do |path|
        stat = File.read(path)
        ppid = stat[stat.rindex(")") + 2..].split[1].to_i
        map[ppid] << File.basename(File.dirname(path)).to_i
      rescue SystemCallError
        next
      end
      map
    end

    def tree(pid)
      map = children_map
      pids = [pid]
      pids.each { |p| pids.concat(map[p]) } # grows while iterating: breadth-first walk
      pids
    end

    # [total VmRSS in KiB over the process and its descendants, per-process detail]
    def rss_kib(pid)
      detail = tree(pid).filter_map do |p|
        status = File.read("/proc/#{p}/status")
        rss = status[/^VmRSS:\s+(\d+)\s+kB/, 1]
        next unless rss

        { "pid" => p, "name" => status[/^Name:\s+(.*)$/, 1], "vmrss_kib" => rss.to_i }
      rescue SystemCallError
        nil
      end
      [detail.sum { |d| d["vmrss_kib"] }, detail]
    end

    # CPU seconds (user + system) used so far by the process and its descendants.
    def cpu_s(pid)
      tree(pid).sum do |p|
        stat = File.read("/proc/#{p}/stat")
        fields = stat[stat.rindex(")") + 2..].split
        (fields[11].to_i + fields[12].to_i) / 100.0 # utime, stime in clock ticks (USER_HZ = 100)
      rescue SystemCallError
        0
      end
    end

    # Process-context CPU seconds (user + nice + system) of the whole machine so far, from
    # /proc/stat. irq/softirq time (loopback packet processing) is left out: the kernel
    # may not charge it to any process, so it would read as "other load".
    def system_busy_s
      f = File.read("/proc/stat").lines.first.split.drop(1).map(&:to_i)
      (f[0] + f[1] + f[2]) / 100.0
    rescue SystemCallError
      0
    end

    # CPU seconds of the children this process has waited for.
    def reaped_children_cpu_s
      t = Process.times
      t.cutime + t.cstime
    end

    def loadavg
      File.read("/proc/loadavg").split.first(3).map(&:to_f)
    rescue SystemCallError
      nil
    end

    def alive?(pid)
      Process.waitpid(pid, Process::WNOHANG).nil?
    rescue Errno::ECHILD
      false
    end

    # Wait for +pid+ up to +timeout+ s; returns the Process::Status or nil.
    def wait(pid, timeout)
      deadline = now + timeout
      loop do
        _, status = Process.waitpid2(pid, Process::WNOHANG)
        return status if status
        return nil if now > deadline

        sleep 0.05
      end
    rescue Errno::ECHILD
      nil
    end

    # Runs a client +argv+ (wrk, h2load) in ROOT with its output in +out_path+; yields its pid
    # once started (so a signal handler can stop it); stops it and raises if it is still
    # running after +bound+ seconds. Returns [its Process::Status, its output].
    def run_bounded(argv, out_path:, bound:, env: {})
      pid = Process.spawn(env, *argv, chdir: ROOT, in: File::NULL, %i[out err] => [out_path, "w"])
      yield pid if block_given?
      status = wait(pid, bound)
      unless status
        stop(pid, grace: 2)
        raise "#{argv.first} did not finish within #{bound}s"
      end
      [status, File.read(out_path)]
    end

    # TERM, then KILL (with every descendant) after +grace+ seconds.
    def stop(pid, grace: 10)
      family = tree(pid)
      begin
        Process.kill(:TERM, pid)
      rescue Errno::ESRCH
        return :gone
      end
      return :term if wait(pid, grace)

      family.reverse_each do |p|
        Process.kill(:KILL, p)
      rescue Errno::ESRCH
        next
      end
      wait(pid, 5)
      :kill
    end

    # #stop, then KILL for whatever is left in +pid+'s process group (workers that outlived
    # their master).
    # A server (+argv+ with +env+ only) in its own process group, its output in +log+; its pid.
    def spawn_server(env, argv, log, chdir:)
      Process.spawn(env, *argv, chdir: chdir, unsetenv_others: true, pgroup: true, in: File::NULL,
                                %i[out err] => [log, "w"])
    end

    def stop_group(pid, grace: 10)
      how = stop(pid, grace: grace)
      begin
        Process.kill(:KILL, -pid)
      rescue Errno::ESRCH, Errno::EPERM
        nil
      end
      how
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # Waits up to +timeout+ seconds, looking every 100 ms, until the block says the server
    # started for +what+ serves; otherwise aborts the run with the last lines of its +log+.
    def await_server(what, log, timeout: 60)
      deadline = now + timeout
      until now > deadline
        return if yield

        sleep 0.1
      end
      abort "#{what} never answered; its log:\n#{File.read(log).lines.last(15).join}"
    end
  end

  # Where the CPU time went while a load generator ran against a server: the server's
  # process tree, the load generators this process reaped meanwhile (wrk), and anything
  # else on the machine (other load, which makes a measurement noisy).
  class CpuWindow
    attr_reader :loadavg_before

    def initialize(pid)
      @pid = pid
      @loadavg_before = Procs.loadavg
      @server = Procs.cpu_s(pid)
      @system = Procs.system_busy_s
      @reaped = Procs.reaped_children_cpu_s
    end

    # [server CPU s, load generator CPU s, other processes' share of all CPUs in %] over a
    # run of +seconds+.
    def finish(seconds)
      server = (Procs.cpu_s(@pid) - @server).round(2)
      reaped = (Procs.reaped_children_cpu_s - @reaped).round(2)
      other = [Procs.system_busy_s - @system - server - reaped, 0].max
      [server, reaped, (100.0 * other / (Etc.nprocessors * seconds)).round(1)]
    end
  end

  # Memory of a process tree from /proc/PID/smaps_rollup (RSS and PSS; PSS splits pages
  # shared between forked workers, so the sum over a tree is what it really costs).
  module Memory
    module_function

    # { "rss_kib" =>, "pss_kib" =>, "processes" => [{pid, name, rss_kib, pss_kib}] }
    def sample(pid)
      procs = Procs.tree(pid).filter_map do |p|
        rollup = File.read("/proc/#{p}/smaps_rollup")
        name = File.read("/proc/#{p}/comm").strip
        { "pid" => p, "name" => name, "rss_kib" => rollup[/^Rss:\s+(\d+)/, 1].to_i,
          "pss_kib" => rollup[/^Pss:\s+(\d+)/, 1].to_i }
      rescue SystemCallError
        nil
      end
      { "rss_kib" => procs.sum { |d| d["rss_kib"] }, "pss_kib" => procs.sum { |d| d["pss_kib"] }, "processes" => procs }
    end

    # Samples +pid+'s tree every +interval+ s in a thread until #stop; keeps the peak
    # (by PSS) and the mean of the totals.
    class Sampler
      def initialize(pid, interval: 0.5)
        @pid = pid
        @samples = []
        @peak = nil
        @stop = false
        @thread = Thread.new do
          until @stop
            take
            sleep interval
          end
        end
      end

      def stop
        @stop = true
        @thread.join(5)
        take
        n = @samples.size
        {
          "samples" => n,
          "rss_kib_max" => @samples.map(&:first).max, "pss_kib_max" => @samples.map(&:last).max,
          "rss_kib_mean" => Stats.mean(@samples.map(&:first))&.floor, # whole KiB
          "pss_kib_mean" => Stats.mean(@samples.map(&:last))&.floor,
          "processes_at_peak" => @peak && @peak["processes"]
        }
      end

      private

      def take
        s = Memory.sample(@pid)
        return if s["processes"].empty?

        @samples << [s["rss_kib"], s["pss_kib"]]
        @peak = s if @peak.nil? || s["pss_kib"] > @peak["pss_kib"]
      end
    end
  end

  # The environment for child processes, without what `bundle exec` put into ours.
  module Env
    module_function

    def clean
      env = ENV.to_h
      # Undo what `bundle exec` (e.g. rake test:slow) put in our own environment.
      env.each_key.select { |k| k.start_with?("BUNDLER_ORIG_") }.each do |k|
        key = k.delete_prefix("BUNDLER_ORIG_")
        value = env.delete(k)
        if %w[RUBYOPT RUBYLIB].include?(key)
          value == "BUNDLER_ENVIRONMENT_PRESERVER_INTENTIONALLY_NIL" ? env.delete(key) : env[key] = value
        end
      end
      %w[BUNDLE_GEMFILE BUNDLE_BIN_PATH BUNDLE_LOCKFILE BUNDLER_SETUP BUNDLER_VERSION].each { |k| env.delete(k) }
      if env["RUBYOPT"]
        env["RUBYOPT"] = env["RUBYOPT"].split.reject { |a| a.end_with?("bundler/setup") }.join(" ")
        env.delete("RUBYOPT") if env["RUBYOPT"].empty?
      end
      env
    end

    def which(cmd)
      dirs = ENV.fetch("PATH", "").split(File::PATH_SEPARATOR) | %w[/usr/sbin /usr/local/sbin /sbin]
      dirs.map { |d| File.join(d, cmd) }.find { |p| File.file?(p) && File.executable?(p) }
    end

    # Whether GET / on +host+:+port+ (a new connection, HTTP/1.0) answers 200.
    def ok?(host, port)
      Socket.tcp(host, port, connect_timeout: 1) do |s|
        s.write("GET / HTTP/1.0\r\n\r\n")
        s.read.to_s.start_with?("HTTP/1.1 200", "HTTP/1.0 200")
      end
    rescue SystemCallError, IOError
      false
    end

    # Whether something accepts connections on 127.0.0.1:+port+ (for listeners that answer
    # no plain GET: TLS, HTTP/2 only).
    def listening?(port)
      Socket.tcp("127.0.0.1", port, connect_timeout: 1).close.nil?
    rescue SystemCallError
      false
    end

    def free_port
      server = TCPServer.new("127.0.0.1", 0)
      server.addr[1]
    ensure
      server&.close
    end
  end
end
