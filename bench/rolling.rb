#!/usr/bin/env ruby
# frozen_string_literal: true

# Rolling restarts behind a load balancer, retries off: three instances of a server, each in
# its own network namespace (three hosts: bench/lib/hosts.rb), behind HAProxy or nginx
# (bench/lib/balancers.rb), under keep-alive load (wrk through the balancer); each instance
# in turn is restarted by TERM (then started again), by USR2 or by USR1 (or, as the control,
# not at all: none). Counts what the
# clients saw: requests, non-2xx answers and socket errors. Margay and Puma 8 run the same way.
#
#   bundle exec ruby bench/rolling.rb [--balancers haproxy,nginx] [--servers margay,puma]
#     [--restarts term,usr2,usr1] [--workers 2] [--threads 5] [--connections 8]
#     [--drain-delay 3] [--propagation 1] [--margay-flags "..."] [--results-dir DIR] [--keep DIR]
#
# TERM: behind HAProxy the instance leaves by its readiness check (Margay: /readyz on its
# health listener; Puma, which has none: the app's /); behind nginx, which has no active
# checks, the run does what an orchestrator does: removes the instance from the upstreams
# --propagation seconds after the TERM (a reload), and adds it back once it answers again;
# a reload closes nginx's idle client connections, so wrk asks nginx for a connection per
# request (nginx keeps its connections to the instances alive).
# Margay gets --drain-delay (0: not passed). Root only (network namespaces).
# Writes DIR/rolling-<time>.json and .md (DIR: bench/results/rolling-<UTC date>).
require "json"
require "optparse"
require "shellwords"
require "socket"
require "time"
require "tmpdir"
require_relative "lib/procs"
require_relative "lib/servers"
require_relative "lib/result_files"
require_relative "lib/wrk"
require_relative "lib/hosts"
require_relative "lib/balancers"

module MargayBench
  class RollingBench
    PORT = 9292
    HEALTH_PORT = 9393

    # One server process tree in host +index+'s namespace.
    class Instance
      attr_reader :pid, :address, :log

      def initialize(hosts, index, argv:, chdir:, env:, tmp:, workers:)
        @hosts = hosts
        @index = index
        @address = hosts.address(index)
        @argv = argv
        @chdir = chdir
        @env = env
        @workers = workers
        @log = File.join(tmp, "instance#{index + 1}.log")
      end

      def start
        @pid = Process.spawn(@env, *@hosts.argv(@index, @argv), chdir: @chdir, unsetenv_others: true, pgroup: true,
                                                                  in: File::NULL, %i[out err] => [@log, "a"])
        wait_ready
      end

      def wait_ready(seconds = 60)
        deadline = Procs.now + seconds
        until ok? && workers.size >= @workers
          raise "instance #{@index + 1} not ready in #{seconds}s:\n#{File.read(@log).lines.last(15).join}" if Procs.now > deadline

          sleep 0.1
        end
      end

      # The master's children (its workers).
      def workers
        Procs.children_map[@pid]
      end

      def signal(sig)
        Process.kill(sig, @pid)
      end

      # Waits for the master to exit by itself (a TERM sent before); true if it did.
      def wait_exit(seconds)
        Procs.wait(@pid, seconds) ? true : false
      end

      def kill
        Procs.stop_group(@pid, grace: 5) if @pid
      end

      private

      def ok?
        Env.ok?(@address, PORT)
      end
    end

    def initialize(argv)
      @o = { balancers: %w[haproxy nginx], servers: %w[margay puma], restarts: %w[term usr2 usr1], workers: 2,
             threads: 5, connections: 8, drain_delay: 3.0, propagation: 1.0, margay_flags: [],
             app: "bench/apps/hello.ru",
             results_dir: File.join(ROOT, "bench/results", "rolling-#{Time.now.utc.strftime('%Y%m%d')}") }
      OptionParser.new do |p|
        %i[balancers servers restarts].each { |k| p.on("--#{k} LIST", Array) { |v| @o[k] = v } }
        %i[workers threads connections].each { |k| p.on("--#{k} N", Integer) { |v| @o[k] = v } }
        p.on("--drain-delay S", Float) { |v| @o[:drain_delay] = v }
        p.on("--propagation S", Float) { |v| @o[:propagation] = v }
        p.on("--margay-flags FLAGS") { |v| @o[:margay_flags] = Shellwords.split(v) }
        p.on("--app PATH") { |v| @o[:app] = v }
        p.on("--results-dir DIR") { |v| @o[:results_dir] = File.expand_path(v) }
        p.on("--keep DIR", "the logs of every process go to DIR and stay") { |v| @o[:keep] = File.expand_path(v) }
      end.parse!(argv)
    end

    def run
      problem = Hosts.unavailable || (%w[wrk] + @o[:balancers]).find { |cmd| !Env.which(cmd) }&.then { |c| "missing #{c}" }
      abort "bench/rolling.rb: #{problem}" if problem
      @rows = []
      @hosts = Hosts.new(3).up
      in_tmp do |tmp|
        @o[:balancers].each do |balancer|
          @o[:restarts].each do |restart|
            @o[:servers].each do |server|
              row = scenario(server, balancer, restart, tmp)
              @rows << row
              warn format("[rolling] %-7s %-6s %-4s %6d requests %5.0f req/s non-2xx %d socket errors %d%s",
                          balancer, server, restart, row["requests"], row["rps"], row["non_2xx"],
                          row["socket_errors"], row["error"] ? " (#{row['error']})" : "")
            end
          end
        end
      end
      write
      0
    ensure
      @hosts&.down
    end

    # Public for the slow test: one run of +server+ behind +balancer+, every instance restarted
    # once by +restart+; a row of figures.
    def scenario(server, balancer, restart, tmp)
      dir = Dir.mktmpdir("#{server}-#{balancer}-#{restart}-", tmp)
      instances = Array.new(3) { |i| instance(server, i, dir) }
      instances.each(&:start)
      lb = balancer_for(balancer, server, dir, instances).start(File.join(dir, "#{balancer}.log"))
      wait_routed(lb, instances)
      figures = under_load(lb, dir) { |row| instances.each_with_index { |inst, i| restart(restart, lb, instances, i, inst, row) } }
      { "server" => server, "balancer" => balancer, "restart" => restart }.merge(figures)
    ensure
      lb&.stop
      instances&.each(&:kill)
    end

    private

    def in_tmp(&block)
      return Dir.mktmpdir("margay-rolling-", &block) unless @o[:keep]

      FileUtils.mkdir_p(@o[:keep])
      yield @o[:keep]
    end

    def instance(server, index, dir)
      app = File.expand_path(@o[:app], ROOT)
      threads = "0:#{@o[:threads]}"
      bind = "tcp://#{@hosts.address(index)}:#{PORT}"
      argv, env = if server == "margay"
                    [margay_argv(app, threads, index), Env.clean]
                  else
                    [%W[bundle exec puma -b #{bind} -e production -C - -w #{@o[:workers]} -t #{threads} #{app}],
                     Env.clean.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile"))]
                  end
      Instance.new(@hosts, index, argv: argv, chdir: ROOT, env: env, tmp: dir, workers: @o[:workers])
    end

    def margay_argv(app, threads, index)
      flags = @o[:margay_flags].dup
      if @o[:drain_delay].positive?
        flags += ["--drain-delay", @o[:drain_delay].to_s, "--health-bind", "tcp://#{@hosts.address(index)}:#{HEALTH_PORT}"]
      end
      %W[bundle exec exe/margay -b tcp://#{@hosts.address(index)}:#{PORT} -e production -w #{@o[:workers]}
         -t #{threads}] + flags + [app]
    end

    def health?(server)
      server == "margay" && @o[:drain_delay].positive?
    end

    def backends(server, instances)
      instances.each_with_index.map do |inst, i|
        { name: "h#{i + 1}", address: inst.address, port: PORT,
          check: health?(server) ? "/readyz" : nil, check_port: health?(server) ? HEALTH_PORT : nil }
      end
    end

    def balancer_for(name, server, dir, instances)
      port = Env.free_port
      if name == "haproxy"
        Balancers::HAProxy.new(dir: dir, port: port, backends: backends(server, instances))
      else
        @nginx_backends = backends(server, instances)
        Balancers::Nginx.new(dir: dir, port: port, backends: @nginx_backends)
      end
    end

    # Until the balancer routes to every instance (HAProxy: each UP; nginx: a first answer).
    def wait_routed(lb, instances, seconds = 30)
      deadline = Procs.now + seconds
      loop do
        return if lb.respond_to?(:status) ? lb.status.values.count("UP") == instances.size : Env.ok?("127.0.0.1", lb.port)
        raise "the balancer never routed to every instance: #{lb.respond_to?(:status) && lb.status}" if Procs.now > deadline

        sleep 0.1
      end
    end

    # wrk through the balancer while the block restarts the instances (2 s of load before and
    # after); the client's totals.
    def under_load(lb, dir)
      argv = Wrk.argv(threads: 2, connections: @o[:connections], seconds: 600, timeout: 10,
                      url: "http://127.0.0.1:#{lb.port}/")
      # nginx's reload (the orchestrator's part) closes its idle client connections, which wrk
      # counts as read errors: its clients ask for a connection each (nginx keeps its own to
      # the instances alive either way).
      argv.insert(-2, "-H", "Connection: close") if lb.is_a?(Balancers::Nginx)
      row = { "events" => [] }
      data = nil
      runner = Thread.new do
        data, = Wrk.run(argv, out_path: File.join(dir, "wrk.out"), bound: 660) { |pid| @wrk = pid }
      end
      sleep 2
      t0 = Procs.now
      begin
        yield row
      rescue StandardError => e
        row["error"] = "#{e.class}: #{e.message.lines.first.strip}"
      end
      row["restart_s"] = (Procs.now - t0).round(1)
      sleep 2
      Process.kill(:INT, @wrk)
      runner.join
      e = data["errors"]
      seconds = data["duration_us"] / 1e6
      row.merge("requests" => data["requests"], "rps" => data["requests"] / seconds, "non_2xx" => e["status"],
                "socket_errors" => e["connect"] + e["read"] + e["write"] + e["timeout"], "errors" => e,
                "command" => argv.join(" "))
    end

    def restart(kind, lb, instances, index, inst, row)
      t0 = Procs.now
      case kind
      when "none" then sleep 1 # the control: the same load, no restart
      when "term" then term_and_start(lb, instances, index, inst, row, t0)
      else
        before = inst.workers
        inst.signal(kind.upcase)
        deadline = Procs.now + 120
        sleep 0.1 until (inst.workers & before).empty? && inst.workers.size >= @o[:workers] || Procs.now > deadline
        inst.wait_ready
      end
      wait_routed(lb, instances)
      row["events"] << { "instance" => index + 1, "restart" => kind, "seconds" => (Procs.now - t0).round(2) }
    end

    def term_and_start(lb, instances, index, inst, row, t0)
      inst.signal("TERM")
      if lb.is_a?(Balancers::Nginx)
        sleep @o[:propagation]
        lb.backends = @nginx_backends.reject.with_index { |_, i| i == index }
      end
      exited = inst.wait_exit(120)
      row["events"] << { "instance" => index + 1, "exited_s" => (Procs.now - t0).round(2), "exited" => exited }
      inst.kill unless exited
      inst.start
      lb.backends = @nginx_backends if lb.is_a?(Balancers::Nginx)
    end

    def write
      ResultFiles.write("rolling", @o, @rows, markdown)
    end

    def markdown
      lines = ["Three instances x #{@o[:workers]} workers x 0:#{@o[:threads]} threads, #{@o[:app]}, wrk " \
               "-c#{@o[:connections]} through the balancer (keep-alive; to nginx a connection per request), retries off; " \
               "Margay drain_delay #{@o[:drain_delay]} s",
               "", "| balancer | restart | server | requests | req/s | non-2xx | socket errors | restarts took (s) |",
               "|---|---|---|---:|---:|---:|---:|---:|"]
      @rows.each do |r|
        lines << format("| %s | %s | %s | %d | %.0f | %d | %d | %s |", r["balancer"], r["restart"], r["server"],
                        r["requests"], r["rps"], r["non_2xx"], r["socket_errors"], r["error"] || r["restart_s"])
      end
      lines.join("\n") + "\n"
    end
  end
end

exit MargayBench::RollingBench.new(ARGV).run if $PROGRAM_NAME == __FILE__
