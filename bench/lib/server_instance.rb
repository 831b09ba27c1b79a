# frozen_string_literal: true

require "net/http"
require_relative "procs"

module MargayBench
  # A server under test (bench/core.rb, bench/run.rb): spawned with a clean environment in
  # its own process group, logging to a file, ready once GET +path+ answers 200, stopped
  # with TERM, then KILL for its process tree and whatever is left in its group.
  # Subclasses say how to start theirs (#start calls #launch).
  class ServerInstance
    attr_reader :name, :pid, :port, :command, :log_path, :startup_s

    def initialize(name, tmp:, path: "/", start_timeout: 60, read_timeout: 5)
      @name = name
      @tmp = tmp
      @path = path
      @start_timeout = start_timeout
      @read_timeout = read_timeout
      @port = Env.free_port
      @log_path = File.join(tmp, "#{name}-#{@port}.log")
    end

    # :term, :kill (it needed SIGKILL) or :gone.
    def stop
      return unless @pid

      pid = @pid
      @pid = nil
      Procs.stop_group(pid)
    end

    # [VmRSS KiB of the process tree, per-process detail]
    def rss
      Procs.rss_kib(@pid)
    end

    def log_tail(lines = 15)
      File.exist?(@log_path) ? File.readlines(@log_path).last(lines).join : ""
    end

    private

    # +spawn_options+: more of Process.spawn's (e.g. rlimit_nofile:).
    def launch(env, argv, chdir:, **spawn_options)
      @command = argv.join(" ")
      t0 = Procs.now
      @pid = Process.spawn(env, *argv, chdir: chdir, unsetenv_others: true, pgroup: true,
                                       in: File::NULL, %i[out err] => [@log_path, "w"], **spawn_options)
      wait_ready(t0)
      self
    end

    # Fails early if the process exits.
    def wait_ready(t0)
      deadline = t0 + @start_timeout
      last = nil
      until Procs.now > deadline
        raise "#{@name} exited during start-up" unless Procs.alive?(@pid)

        begin
          res = Net::HTTP.start("127.0.0.1", @port, open_timeout: 1, read_timeout: @read_timeout) { |h| h.get(@path) }
          if res.code == "200"
            @startup_s = (Procs.now - t0).round(2)
            return
          end
          last = "HTTP #{res.code}"
        rescue SystemCallError, IOError, Net::OpenTimeout, Net::ReadTimeout, EOFError => e
          last = e.class.name
        end
        sleep 0.1
      end
      raise "#{@name} did not answer GET #{@path} with 200 within #{@start_timeout}s (last: #{last})"
    end
  end
end
