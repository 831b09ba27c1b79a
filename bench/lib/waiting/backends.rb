# frozen_string_literal: true

require "rbconfig"
require_relative "../procs"
require_relative "../postgres"
require_relative "../harness" # Prereqs.seed_rails

module MargayBench
  # What the waiting Rails workloads talk to, started once per benchmark run (bench/waiting.rb,
  # bench/run.rb's rails-pg and rails-pg-slow): the PostgreSQL cluster (bench/lib/postgres.rb),
  # seeded through the Rails app itself, and the slow HTTP service (bench/slow_service.rb).
  # #env is what a server needs to reach them; #cpu_s says how much CPU they used so far (the
  # harness reports it per run: they share the CPUs with the server under test).
  class WaitingBackends
    SLOW_DELAY_MS = 50
    POOL = 64 # ActiveRecord connections per process: more than a thread server uses, enough for fibers

    attr_reader :postgres

    def initialize(tmp:, env:, progress:, pool: POOL)
      @pool = pool
      @tmp = tmp
      @env = env
      @progress = progress
    end

    # Starts PostgreSQL (and the slow service with +slow+), seeds the database; returns self.
    def start(slow:)
      @postgres = Postgres.new(max_connections: 400).start
      @progress.call("PostgreSQL #{@postgres.version} on a unix socket in #{@postgres.dir}")
      seed
      start_slow_service if slow
      self
    end

    # The environment a server of a rails-pg workload gets (+fibers+: the server runs
    # requests in fibers, so Rails isolates its state per fiber).
    def env(fibers: false)
      e = { "DATABASE_URL" => @postgres.url, "BENCH_RAILS_POOL" => @pool.to_s }
      e["BENCH_SLOW_URL"] = "http://127.0.0.1:#{@slow_port}/" if @slow_pid
      e["BENCH_RAILS_ISOLATION"] = "fiber" if fibers
      e
    end

    # CPU seconds used so far by the cluster's processes and the slow service.
    def cpu_s
      { "postgres" => @postgres&.pid ? Procs.cpu_s(@postgres.pid) : 0.0,
        "slow_service" => @slow_pid ? Procs.cpu_s(@slow_pid) : 0.0 }
    end

    def stop
      if @slow_pid
        Procs.stop(@slow_pid, grace: 3)
        @slow_pid = nil
      end
      @postgres&.stop
    end

    private

    def seed
      Prereqs.seed_rails(@env.merge(env), "PostgreSQL")
    end

    def start_slow_service
      @slow_port = Env.free_port
      log = File.join(@tmp, "slow_service.log")
      @slow_pid = Process.spawn(@env, "bundle", "exec", "ruby", "bench/slow_service.rb", "--port", @slow_port.to_s,
                                "--delay-ms", SLOW_DELAY_MS.to_s, chdir: ROOT, unsetenv_others: true, in: File::NULL,
                                                                  %i[out err] => [log, "w"])
      deadline = Procs.now + 30
      until File.read(log).include?("listening")
        raise "bench/slow_service.rb did not start: #{File.read(log)}" if Procs.now > deadline || !Procs.alive?(@slow_pid)

        sleep 0.1
      end
      @progress.call("slow service (#{SLOW_DELAY_MS} ms) on 127.0.0.1:#{@slow_port}")
    end
  end
end
