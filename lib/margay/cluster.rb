# frozen_string_literal: true

require "rbconfig"
require "socket"
require_relative "runner"
require_relative "systemd"
require_relative "worker_process"
require "margay/margay_native"
require_relative "cluster/spawning"

module Margay
  # The master process of cluster mode. It binds the listeners (or inherits
  # them), loads the app when preloading, forks config.workers workers that
  # each run a Server on the shared listeners, and supervises them:
  # heartbeats, replacement of dead, silent or oversized workers (with
  # back-off on boot failures), reforking from a warm mold, and the signals
  # in docs/SIGNALS.md. The master never creates an engine nor runs the app.
  #
  # Every worker is watched through its heartbeat pipe (EOF means it is gone),
  # so workers forked by the mold are supervised like the others. On Linux the
  # master is also a child subreaper: those workers (double-forked, so not the
  # mold's children) become its children, the cluster stays one process tree,
  # and it reaps them; elsewhere init does.
  class Cluster < Runner
    include Spawning

    # Master-side record of one worker process (or of the mold). stop_at: when
    # it was told to stop (it gets shutdown_timeout + 5 s from then).
    WorkerRecord = Struct.new(:index, :pid, :beat, :ctl, :handoff, :last_beat, :booted, :retiring, :stopping,
                              :mold, :stop_at, keyword_init: true)

    MASTER_SIGNALS = %w[TERM INT QUIT TTIN TTOU USR1 USR2 HUP URG].freeze
    STOP_SIGNALS = %w[TERM INT QUIT].freeze
    MAX_BACKOFF = 30
    BOARD_SLOTS = 256 # worker indexes that can report idle threads (see Native::IdleBoard)

    # @param config [Configuration] with workers > 0
    # @param log [Log]
    # @param app_loader [#call] returns the Rack app (called in the master when
    #   preloading, else in each worker)
    # @param restart_argv [Array<String>] the command line re-executed on USR2
    def initialize(config, log:, app_loader:, restart_argv: nil)
      super(config, log: log)
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
      @app_traps = {}
      @board = Native::IdleBoard.new(BOARD_SLOTS) # shared with every worker forked from now on
      record_signals # from now on: a signal during bind or preload is not lost, nor fatal
    end

    # Run until TERM/INT/QUIT; returns after every worker has exited.
    # @param preloaded_app [#call, nil] the app, when the caller preloaded it
    def run(preloaded_app: nil)
      bind
      Native.child_subreaper
      @app = preloaded_app || (@app_loader.call if @config.preload_app?)
      record_signals
      supervise until @stopping && @workers.empty?
      close_listeners
    end

    # Graceful stop of the whole cluster (trap-safe).
    def stop
      request("TERM")
    end

    private

    def supervise
      maintain unless @stopping
      wait_for_events
      handle_signal(@signals.shift) until @signals.empty? # one at a time: a restart may look at what follows
      reap
      check_heartbeats
      check_memory
      watchdog_ping
      force_stop if @stopping && now > @stop_deadline
    end

    # ---- signals ----

    # Record the master's signals for the supervision loop. Called when the
    # master starts and again once the app is loaded: a handler the app set
    # meanwhile (say, HUP to reopen its logs) is kept for the workers.
    def record_signals
      @own_traps ||= {}
      MASTER_SIGNALS.each do |sig|
        previous = trap(sig, @own_traps[sig] ||= proc { request(sig) })
        @app_traps[sig] = previous if previous.is_a?(Proc) && !previous.equal?(@own_traps[sig])
      end
    end

    def request(sig)
      @signals << sig
      @wake_w.write_nonblock(".", exception: false)
    rescue IOError
      nil
    end

    def handle_signal(sig)
      case sig
      when *STOP_SIGNALS then begin_stop
      when "TTIN" then @target += 1
      when "TTOU" then shrink
      when "USR1" then phased_restart
      when "USR2" then hot_restart
      when "HUP" then signal_workers(:HUP)
      when "URG" then promote(serving.select { |w| w.booted && !w.retiring }.min_by(&:index))
      end
    end

    def begin_stop
      return if @stopping

      Systemd.notify("STOPPING=1")
      @log.info("master: graceful stop (#{@workers.size} workers)")
      @stopping = true
      @stop_deadline = now + @config.shutdown_timeout + 5
      signal_workers(:TERM)
      close_listeners # the workers close theirs as they stop: then new clients are refused
    end

    def close_listeners
      @listeners.each { |l| l.io.close unless l.io.closed? }
    end

    def force_stop
      @workers.each_value { |w| kill(w, :KILL) }
    end

    def shrink
      return if @target <= 1

      @target -= 1
      victim = serving.max_by(&:index)
      retire(victim) if victim
    end

    # USR1: replace workers one at a time. The mold goes too, so that new
    # workers load the app anew (unless it is preloaded in the master).
    def phased_restart
      return if @stopping

      @log.info("master: phased restart of #{serving.size} workers")
      Systemd.notify("RELOADING=1")
      @ready = false
      hook(:on_restart)
      @workers.each_value { |w| w.mold ? retire(w) : (w.retiring = true) }
    end

    # USR2: stop the workers gracefully, then re-execute the master with the
    # listening sockets inherited, so no connection is refused: they wait in
    # the listen backlog until the new workers accept them.
    def hot_restart
      return if @stopping
      return @log.warn("master: USR2 ignored: no command line to re-execute") unless @restart_argv

      @log.info("master: hot restart")
      Systemd.notify("RELOADING=1")
      hook(:on_restart)
      signal_workers(:TERM)
      deadline = now + @config.shutdown_timeout + 5
      until @workers.empty?
        force_stop if now > deadline
        wait_for_events
        reap
        watchdog_ping
        return abandon_hot_restart if @signals.intersect?(STOP_SIGNALS)
      end
      reexec
    end

    # Replace this process by a new master that inherits the listeners. If
    # that fails (the Ruby binary or the script was removed, say), the master
    # carries on: the supervision loop starts new workers.
    def reexec
      inherit = @listeners.map { |l| "#{l.bind}=#{l.io.fileno}" }.join(",")
      fds = @listeners.to_h { |l| [l.io.fileno, l.io.fileno] }
      env = { Binder::INHERIT_ENV => inherit, Binder::ACTIVATED_ENV => (@listeners.any?(&:activated) ? "1" : nil) }
      Systemd.notify("WATCHDOG=1")
      exec(env, RbConfig.ruby, *@restart_argv, fds.merge(close_others: false))
    rescue SystemCallError => e
      @log.error("master: hot restart failed: cannot re-execute (#{e.message}); starting workers again")
      @ready = false
    end

    # A stop asked for while the old workers were finishing: stop instead of
    # re-executing (the new process would not know it was asked to stop).
    def abandon_hot_restart
      @log.info("master: stop requested during the hot restart: stopping instead")
      begin_stop
    end

    # ---- workers ----

    def serving
      @workers.values.reject { |w| w.mold || w.stopping }
    end

    def mold
      @workers.values.find { |w| w.mold && !w.stopping }
    end

    def maintain
      return if mold&.mold == :pending # wait until the mold can fork

      step_phased_restart
      return if serving.size >= @target || now < @next_spawn_at

      spawn_worker
    end

    # One retiring worker at a time, and only while every other worker is up.
    def step_phased_restart
      return if serving.any? { |w| !w.booted }
      return if @workers.values.any? { |w| w.retiring && w.stopping }

      old = serving.find(&:retiring)
      retire(old) if old
    end

    def retire(worker)
      told_to_stop(worker)
      kill(worker, :TERM)
    end

    def told_to_stop(worker)
      worker.stopping = true
      worker.stop_at ||= now
    end

    def wait_for_events
      handoffs = @workers.values.to_h { |w| [w.handoff, w] } # also a pending mold's: what it sent before it knew
      ready, = IO.select([@wake_r, *@workers.values.map(&:beat), *handoffs.keys], nil, nil, 0.5)
      (ready || []).each do |io|
        if io == @wake_r
          io.read_nonblock(1024, exception: false)
        elsif handoffs[io]
          forward_connection(handoffs[io])
        else
          record_beat(io)
        end
      end
    end

    def record_beat(io)
      worker = @workers.values.find { |w| w.beat == io }
      return unless worker

      data = io.read_nonblock(1024, exception: false)
      return forget(worker, nil) if data.nil? # EOF: the process is gone
      return unless data.is_a?(String)

      worker.last_beat = now
      booted(worker) if data.include?("r") && !worker.booted
      promote(worker) if data.include?("R") && @config.refork_after
      mold_ready(worker) if data.include?("M")
    end

    def booted(worker)
      worker.booted = true
      @failures = 0
      @log.info("master: worker #{worker.index} (pid #{worker.pid}) booted")
      return if @ready || serving.count(&:booted) < @target

      @ready = Systemd.notify("READY=1") || true # once every worker of a generation serves
    end

    def watchdog_ping
      interval = Systemd.watchdog_interval
      return unless interval && now >= (@next_watchdog ||= 0)

      Systemd.notify("WATCHDOG=1")
      @next_watchdog = now + interval
    end

    # A worker that stopped reporting is killed, unless it was told to stop:
    # while it finishes its requests it does not report, and it has
    # shutdown_timeout + 5 s for that, however short worker_timeout is.
    def check_heartbeats
      @workers.each_value do |w|
        if w.stop_at
          next if now - w.stop_at < @config.shutdown_timeout + 5

          @log.error("master: worker #{w.index} (pid #{w.pid}) still stopping after #{@config.shutdown_timeout + 5}s: killing it")
          w.stop_at = now # one kill per grace period
        else
          limit = w.booted || w.mold ? @config.worker_timeout : @config.worker_boot_timeout
          next if now - w.last_beat < limit

          @log.error("master: worker #{w.index} (pid #{w.pid}) silent for #{limit}s: killing it")
          w.last_beat = now # one kill per timeout
        end
        kill(w, :KILL)
      end
    end

    # worker_memory_limit: a worker over it finishes its requests and is replaced.
    def check_memory
      limit = @config.worker_memory_limit
      return unless limit && now >= (@next_memory_check ||= 0)

      @next_memory_check = now + 1
      serving.select(&:booted).each do |w|
        rss = rss_bytes(w.pid)
        next unless rss && rss > limit

        @log.warn("master: worker #{w.index} (pid #{w.pid}) RSS #{rss / 1024 / 1024} MiB over the limit of " \
                  "#{limit / 1024 / 1024} MiB: replacing it")
        retire(w)
      end
    end

    def rss_bytes(pid)
      File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+) kB/, 1].to_i * 1024
    rescue SystemCallError
      kb = `ps -o rss= -p #{Integer(pid)}`.strip
      kb.empty? ? nil : kb.to_i * 1024
    end

    # Collect exit statuses of children (workers, the mold, and as subreaper
    # the workers the mold forked); the heartbeat pipe's EOF usually told us already.
    def reap
      loop do
        pid, status = Process.wait2(-1, Process::WNOHANG)
        break unless pid

        worker = @workers[pid]
        forget(worker, status) if worker
      end
    rescue Errno::ECHILD
      nil
    end

    def forget(worker, status)
      return unless @workers.delete(worker.pid)

      [worker.beat, worker.ctl, worker.handoff].each { |io| io.close unless io.closed? }
      @board.clear(worker.index) if !worker.mold && worker.index < @board.size # a killed worker cannot count itself out
      return if worker.stopping && (status.nil? || status.success?)

      what = worker.mold ? "the mold" : "worker #{worker.index}"
      @log.warn("master: #{what} (pid #{worker.pid}) exited#{status ? ": #{status.inspect}" : ''}") unless @stopping
      return if worker.booted || worker.mold

      back_off # it never got to serve
    end

    # Delay the next start instead of fork-looping: 1, 2, 4 ... 30 s.
    def back_off
      @failures += 1
      delay = [2**(@failures - 1), MAX_BACKOFF].min
      @next_spawn_at = now + delay
      @log.warn("master: worker boot failed #{@failures} time(s); next attempt in #{delay}s")
    end

    def signal_workers(sig)
      @workers.each_value do |w|
        told_to_stop(w) if sig == :TERM
        kill(w, sig)
      end
    end

    def kill(worker, sig)
      kill_pid(worker.pid, sig)
    end

    # EPERM: the pid now belongs to someone else's process (a worker gone unseen).
    def kill_pid(pid, sig)
      Process.kill(sig, pid)
    rescue Errno::ESRCH, Errno::EPERM
      nil
    end

    # A user hook run in the master: its failure is logged, never fatal to the master.
    def hook(name, *args)
      @config.run_hook(name, *args)
    rescue StandardError => e
      @log.exception(e, "#{name} hook failed")
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
