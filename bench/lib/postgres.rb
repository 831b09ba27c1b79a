# frozen_string_literal: true

require "etc"
require "fileutils"
require "tmpdir"
require_relative "procs"

module MargayBench
  # A throwaway PostgreSQL cluster for the bench apps (bench/waiting.rb, bench/run.rb's
  # rails-pg workloads): `initdb` and `pg_ctl` in a temp dir, listening only on a unix socket
  # in that dir (listen_addresses = '', no TCP), one database "bench" for user "bench" (trust
  # auth: nothing but this machine's processes can reach the socket). #stop shuts it down
  # (fast shutdown) and removes the dir; a watchdog process does the same if the harness dies
  # without calling #stop (exit! from a signal handler, SIGKILL).
  #
  # As root (CI, the bench machine) initdb refuses to run, so the cluster runs as the
  # `postgres` user of Debian's package (else `nobody`); the temp dir is chowned to it.
  # Durability is off (fsync, synchronous_commit, full_page_writes): the data is a seed
  # that is rebuilt every run, and the benchmark measures waiting, not the disk.
  class Postgres
    DB = "bench"
    USER = "bench"

    attr_reader :dir, :pid, :version

    # The directory of initdb/pg_ctl/postgres: BENCH_PG_BIN, else the newest
    # /usr/lib/postgresql/N/bin (Debian puts them there, not on PATH), else PATH.
    def self.bin_dir
      return ENV["BENCH_PG_BIN"] if ENV["BENCH_PG_BIN"]

      debian = Dir.glob("/usr/lib/postgresql/*/bin").max_by { |d| d[%r{/(\d+)/bin\z}, 1].to_i }
      return debian if debian && File.executable?(File.join(debian, "initdb"))

      (initdb = Env.which("initdb")) && File.dirname(initdb)
    end

    # Why a cluster cannot be started here (nil: it can).
    def self.missing
      bin = bin_dir
      return "PostgreSQL's initdb/pg_ctl not found: `apt-get install -y postgresql` (or set BENCH_PG_BIN)" unless bin

      %w[initdb pg_ctl postgres].each do |tool|
        return "#{bin}/#{tool} is missing: `apt-get install -y postgresql`" unless File.executable?(File.join(bin, tool))
      end
      nil
    end

    def initialize(max_connections: 300, log: nil)
      @max_connections = max_connections
      @log = log
      @bin = self.class.bin_dir
    end

    # Starts the cluster and creates the database; returns self. Raises with the server's
    # log on failure (and removes what it made).
    def start
      @dir = Dir.mktmpdir("margay-pg-")
      File.chmod(0o755, @dir)
      owner = run_as
      FileUtils.chown_R(owner.uid, owner.gid, @dir) if owner
      data = File.join(@dir, "data")
      @log_path = File.join(@dir, "postgres.log")
      run!("initdb", "-D", data, "-U", USER, "-A", "trust", "-E", "UTF8", "--locale", "C", "--no-sync")
      opts = "-k #{@dir} -c listen_addresses='' -c max_connections=#{@max_connections} -c fsync=off " \
             "-c synchronous_commit=off -c full_page_writes=off -c shared_buffers=64MB"
      run!("pg_ctl", "-D", data, "-l", @log_path, "-w", "-t", "60", "-o", opts, "start")
      @pid = File.read(File.join(data, "postmaster.pid")).lines.first.to_i
      start_watchdog
      run!("createdb", "-h", @dir, "-U", USER, DB)
      @version = IO.popen([File.join(@bin, "postgres"), "--version"], &:read).strip
      self
    rescue StandardError => e
      log = log_tail
      stop
      raise "PostgreSQL did not start: #{e.message}#{log.empty? ? '' : "\n#{log}"}"
    end

    # Rails' DATABASE_URL for the cluster: the socket dir as the host.
    def url
      "postgresql:///#{DB}?host=#{@dir}&user=#{USER}"
    end

    # Fast shutdown (SIGINT to the postmaster: it ends its sessions, no checkpoint wait
    # beyond its own), then the dir is removed. Safe to call twice.
    def stop
      if @pid
        signal(:INT, @pid)
        deadline = Procs.now + 15
        sleep 0.05 while alive?(@pid) && Procs.now < deadline
        signal(:KILL, @pid) if alive?(@pid) # its children exit when the postmaster is gone
        @pid = nil
      end
      if @watchdog
        signal(:KILL, @watchdog)
        Procs.wait(@watchdog, 2)
        @watchdog = nil
      end
      FileUtils.rm_rf(@dir) if @dir
      @dir = nil
    end

    def log_tail(lines = 20)
      @log_path && File.exist?(@log_path) ? File.readlines(@log_path).last(lines).join : ""
    end

    private

    # The user the cluster runs as when we are root (nil: ourselves).
    def run_as
      return nil unless Process.uid.zero?

      Etc.getpwnam("postgres")
    rescue ArgumentError
      Etc.getpwnam("nobody")
    end

    # Runs a PostgreSQL tool (as run_as when root); raises with its output on failure.
    def run!(tool, *args)
      out_path = File.join(@dir, "#{tool}.out")
      owner = run_as
      pid = fork do
        if owner
          Process::GID.change_privilege(owner.gid)
          Process::UID.change_privilege(owner.uid)
        end
        # pg_ctl's postmaster must not share our process group: ^C in a terminal would
        # reach it before the harness had a chance to stop it in order.
        Process.setsid if tool == "pg_ctl"
        $stdin.reopen(File::NULL)
        $stdout.reopen(out_path, "a")
        $stderr.reopen($stdout)
        exec(File.join(@bin, tool), *args)
      end
      status = Procs.wait(pid, 90)
      return if status&.success?

      Procs.stop(pid, grace: 2) unless status
      raise "#{tool} failed (#{status ? status.inspect : 'timed out'}): #{File.read(out_path).lines.last(10).join}"
    end

    # A detached shell that outlives us only to stop the cluster and remove the dir once
    # this process is gone (polls once a second).
    def start_watchdog
      script = "while kill -0 #{Process.pid} 2>/dev/null; do sleep 1; done; kill -INT #{@pid} 2>/dev/null; " \
               "i=0; while kill -0 #{@pid} 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done; " \
               "kill -KILL #{@pid} 2>/dev/null; rm -rf '#{@dir}'"
      @watchdog = Process.spawn("sh", "-c", script, pgroup: true, in: File::NULL, out: File::NULL, err: File::NULL)
      Process.detach(@watchdog)
    end

    def alive?(pid)
      Process.kill(0, pid)
      true
    rescue Errno::ESRCH
      false
    rescue Errno::EPERM
      true
    end

    def signal(sig, pid)
      Process.kill(sig, pid)
    rescue Errno::ESRCH, Errno::EPERM
      nil
    end
  end
end
