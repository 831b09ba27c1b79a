# frozen_string_literal: true

require "rbconfig"
require_relative "binder"
require_relative "server"
require_relative "systemd"

module Margay
  # The master process of cluster mode. It binds the listeners (or inherits
  # them across a hot restart), loads the app when preloading, forks
  # config.workers workers that each run a Server on the shared listeners, and
  # supervises them: heartbeats, replacement of dead or silent workers with
  # back-off on boot failures, and the signals in docs/SIGNALS.md. The master
  # never creates an engine and never runs the app.
  class Cluster
    # Master-side record of one worker process.
    WorkerRecord = Struct.new(:index, :pid, :beat, :last_beat, :booted, :started_at, :retiring, :stopping,
                              keyword_init: true)

    MASTER_SIGNALS = %w[TERM INT QUIT TTIN TTOU USR1 USR2 HUP].freeze
    HEARTBEAT_INTERVAL = 1.0
    MAX_BACKOFF = 30

    attr_reader :listeners

    # @param config [Configuration] with workers > 0
    # @param log [Log]
    # @param app_loader [#call] returns the Rack app (called in the master when
    #   preloading, else in each worker)
    # @param restart_argv [Array<String>] the command line re-executed on USR2
    def initialize(config, log:, app_loader:, restart_argv: nil)
      @config = config
      @log = log
      @app_loader = app_loader
      @restart_argv = restart_argv
      @workers = {}
      @target = config.workers
      @signals = []
      @wake_r, @wake_w = IO.pipe
      @stopping = false
      @app = nil
      @failures = 0
      @next_spawn_at = 0
    end

    # Bind (or inherit) the listeners. Returns self.
    def bind
      @listeners ||= Binder.open(@config.binds, backlog: @config.backlog)
      self
    end

    def addresses
      (@listeners || []).map(&:url)
    end

    # Run until TERM/INT/QUIT; returns after every worker has exited.
    # @param preloaded_app [#call, nil] the app, when the caller preloaded it
    def run(preloaded_app: nil)
      bind
      @app = preloaded_app || (@app_loader.call if @config.preload_app?)
      trap_signals
      supervise until @stopping && @workers.empty?
      @listeners.each { |l| l.io.close unless l.io.closed? }
    end

    # Graceful stop of the whole cluster (trap-safe).
    def stop
      request("TERM")
    end

    private

    def supervise
      maintain unless @stopping
      wait_for_events
      @signals.shift(@signals.size).each { |sig| handle_signal(sig) }
      reap
      check_heartbeats
      check_memory
      watchdog_ping
      force_stop if @stopping && now > @stop_deadline
    end

    # ---- signals ----

    def trap_signals
      MASTER_SIGNALS.each { |sig| trap(sig) { request(sig) } }
    end

    def request(sig)
      @signals << sig
      @wake_w.write_nonblock(".", exception: false)
    rescue IOError
      nil
    end

    def handle_signal(sig)
      case sig
      when "TERM", "INT", "QUIT" then begin_stop
      when "TTIN" then @target += 1
      when "TTOU" then shrink
      when "USR1" then phased_restart
      when "USR2" then hot_restart
      when "HUP" then signal_workers(:HUP)
      end
    end

    def begin_stop
      return if @stopping

      Systemd.notify("STOPPING=1")
      @log.info("master: graceful stop (#{@workers.size} workers)")
      @stopping = true
      @stop_deadline = now + @config.shutdown_timeout + 5
      signal_workers(:TERM)
    end

    def force_stop
      @workers.each_value { |w| kill(w, :KILL) }
    end

    def shrink
      return if @target <= 1

      @target -= 1
      victim = @workers.values.reject(&:stopping).max_by(&:index)
      retire(victim) if victim
    end

    # USR1: replace workers one at a time; each new worker loads the app anew
    # unless it is preloaded.
    def phased_restart
      @log.info("master: phased restart of #{@workers.size} workers")
      Systemd.notify("RELOADING=1")
      @ready = false
      @config.run_hook(:on_restart)
      @workers.each_value { |w| w.retiring = true }
    end

    # USR2: stop the workers gracefully, then re-execute the master with the
    # listening sockets inherited, so no connection is refused: they wait in
    # the listen backlog until the new workers accept them.
    def hot_restart
      unless @restart_argv
        @log.warn("master: USR2 ignored: no command line to re-execute")
        return
      end
      @log.info("master: hot restart")
      Systemd.notify("RELOADING=1")
      @config.run_hook(:on_restart)
      signal_workers(:TERM)
      deadline = now + @config.shutdown_timeout + 5
      reap(blocking: true) until @workers.empty? || now > deadline
      force_stop
      reap(blocking: true) until @workers.empty?
      inherit = @listeners.map { |l| "#{l.bind}=#{l.io.fileno}" }.join(",")
      fds = @listeners.to_h { |l| [l.io.fileno, l.io.fileno] }
      env = { Binder::INHERIT_ENV => inherit, Binder::ACTIVATED_ENV => (@listeners.any?(&:activated) ? "1" : nil) }
      exec(env, RbConfig.ruby, *@restart_argv, fds.merge(close_others: false))
    end

    # ---- workers ----

    def maintain
      step_phased_restart
      live = @workers.values.count { |w| !w.stopping }
      return if live >= @target || now < @next_spawn_at

      spawn_worker
    end

    # One retiring worker at a time, and only while every other worker is up.
    def step_phased_restart
      return if @workers.values.any? { |w| !w.booted && !w.stopping }
      return if @workers.values.any? { |w| w.retiring && w.stopping }

      old = @workers.values.find(&:retiring)
      retire(old) if old
    end

    def retire(worker)
      worker.stopping = true
      kill(worker, :TERM)
    end

    def spawn_worker
      index = ((0...@target + @workers.size).to_a - @workers.values.map(&:index)).first
      beat_r, beat_w = IO.pipe
      @config.run_hook(:before_fork, index)
      pid = fork { worker_main(index, beat_w, beat_r) }
      beat_w.close
      @workers[pid] = WorkerRecord.new(index: index, pid: pid, beat: beat_r, last_beat: now, booted: false,
                                       started_at: now, retiring: false, stopping: false)
    end

    # The child side: serve on the inherited listeners until TERM.
    def worker_main(index, beat_w, beat_r)
      beat_r.close
      @wake_r.close
      @wake_w.close
      @workers.each_value { |w| w.beat.close }
      MASTER_SIGNALS.each { |sig| trap(sig, "DEFAULT") }
      $PROGRAM_NAME = "margay: worker #{index}"
      app = @app || @app_loader.call
      @config.run_hook(:on_worker_boot, index)
      server = nil
      # a request that ignores its request_timeout interrupt: drain and let the master replace us
      on_stuck = -> { server&.stop }
      server = Server.new(app, @config, log: @log, listeners: @listeners, on_tick: heartbeat(beat_w), on_stuck: on_stuck)
      %w[TERM INT QUIT].each { |sig| trap(sig) { server.stop } }
      %w[TTIN TTOU USR1 USR2 HUP].each { |sig| trap(sig, "IGNORE") }
      server.run
      @config.run_hook(:on_worker_shutdown, index)
      exit!(0)
    rescue Exception => e # rubocop:disable Lint/RescueException -- a worker must never run the master's code
      @log.exception(e, "worker #{index} failed")
      exit!(1)
    end

    # Called about every 5 ms in the worker: "r" once serving, then "." each second.
    def heartbeat(io)
      last = nil
      lambda do
        t = now
        next if last && t - last < HEARTBEAT_INTERVAL

        io.write_nonblock(last ? "." : "r", exception: false)
        last = t
      end
    end

    def wait_for_events
      ready, = IO.select([@wake_r, *@workers.values.map(&:beat)], nil, nil, 0.5)
      (ready || []).each do |io|
        if io == @wake_r
          io.read_nonblock(1024, exception: false)
        else
          record_beat(io)
        end
      end
    end

    def record_beat(io)
      worker = @workers.values.find { |w| w.beat == io }
      data = io.read_nonblock(1024, exception: false)
      return unless worker && data.is_a?(String)

      worker.last_beat = now
      return if worker.booted || !data.include?("r")

      worker.booted = true
      @failures = 0
      @log.info("master: worker #{worker.index} (pid #{worker.pid}) booted")
      ready_once
    end

    # READY=1 once every worker of the first generation serves (systemd Type=notify).
    def ready_once
      return if @ready || @workers.values.count(&:booted) < @target

      @ready = Systemd.notify("READY=1") || true
    end

    def watchdog_ping
      interval = Systemd.watchdog_interval
      return unless interval && now >= (@next_watchdog ||= 0)

      Systemd.notify("WATCHDOG=1")
      @next_watchdog = now + interval
    end

    def check_heartbeats
      @workers.each_value do |w|
        limit = w.booted ? @config.worker_timeout : @config.worker_boot_timeout
        next if now - w.last_beat < limit

        @log.error("master: worker #{w.index} (pid #{w.pid}) silent for #{limit}s: killing it")
        kill(w, :KILL)
        w.last_beat = now # one kill per timeout
      end
    end

    # worker_memory_limit: a worker over it finishes its requests and is replaced.
    def check_memory
      limit = @config.worker_memory_limit
      return unless limit && now >= (@next_memory_check ||= 0)

      @next_memory_check = now + 1
      @workers.each_value do |w|
        next if w.stopping || !w.booted

        rss = rss_bytes(w.pid)
        next unless rss && rss > limit

        @log.warn("master: worker #{w.index} (pid #{w.pid}) RSS #{rss / 1024 / 1024} MiB over the limit of " \
                  "#{limit / 1024 / 1024} MiB: replacing it")
        retire(w)
      end
    end

    def rss_bytes(pid)
      status = File.read("/proc/#{pid}/status")
      status[/^VmRSS:\s+(\d+) kB/, 1].to_i * 1024
    rescue SystemCallError
      kb = `ps -o rss= -p #{Integer(pid)}`.strip
      kb.empty? ? nil : kb.to_i * 1024
    end

    def reap(blocking: false)
      loop do
        pid, status = Process.wait2(-1, blocking ? 0 : Process::WNOHANG)
        break unless pid

        worker = @workers.delete(pid)
        next unless worker

        worker.beat.close
        note_exit(worker, status)
        break if blocking
      end
    rescue Errno::ECHILD
      nil
    end

    def note_exit(worker, status)
      return if worker.stopping && status.success?

      @log.warn("master: worker #{worker.index} (pid #{worker.pid}) exited: #{status.inspect}") unless @stopping
      return if worker.booted

      # Never got to serve: back off instead of fork-looping.
      @failures += 1
      delay = [2**(@failures - 1), MAX_BACKOFF].min
      @next_spawn_at = now + delay
      @log.warn("master: worker boot failed #{@failures} time(s); next attempt in #{delay}s")
    end

    def signal_workers(sig)
      @workers.each_value do |w|
        w.stopping = true if sig == :TERM
        kill(w, sig)
      end
    end

    def kill(worker, sig)
      Process.kill(sig, worker.pid)
    rescue Errno::ESRCH
      nil
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
