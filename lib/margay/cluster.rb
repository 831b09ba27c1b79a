# frozen_string_literal: true

require "rbconfig"
require "socket"
require_relative "binder"
require_relative "systemd"
require_relative "worker_process"

module Margay
  # The master process of cluster mode. It binds the listeners (or inherits
  # them), loads the app when preloading, forks config.workers workers that
  # each run a Server on the shared listeners, and supervises them:
  # heartbeats, replacement of dead, silent or oversized workers (with
  # back-off on boot failures), reforking from a warm mold, and the signals
  # in docs/SIGNALS.md. The master never creates an engine nor runs the app.
  #
  # Every worker is watched through its heartbeat pipe (EOF means it is gone),
  # so workers forked by the mold, which are not the master's children, are
  # supervised like the others.
  class Cluster
    # Master-side record of one worker process (or of the mold).
    WorkerRecord = Struct.new(:index, :pid, :beat, :ctl, :handoff, :last_beat, :booted, :retiring, :stopping,
                              :mold, keyword_init: true)

    MASTER_SIGNALS = %w[TERM INT QUIT TTIN TTOU USR1 USR2 HUP URG].freeze
    STOP_SIGNALS = %w[TERM INT QUIT].freeze
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

    # The handlers in place before (an app loaded in the master may have set
    # one, e.g. HUP to reopen its logs) are kept for the workers.
    def trap_signals
      @app_traps = MASTER_SIGNALS.to_h { |sig| [sig, trap(sig) { request(sig) }] }
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
      when "URG" then promote(serving.select(&:booted).min_by(&:index))
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
      victim = serving.max_by(&:index)
      retire(victim) if victim
    end

    # USR1: replace workers one at a time. The mold goes too, so that new
    # workers load the app anew (unless it is preloaded in the master).
    def phased_restart
      @log.info("master: phased restart of #{serving.size} workers")
      Systemd.notify("RELOADING=1")
      @ready = false
      @config.run_hook(:on_restart)
      @workers.each_value { |w| w.mold ? retire(w) : (w.retiring = true) }
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
      until @workers.empty?
        force_stop if now > deadline
        wait_for_events
        reap
        return abandon_hot_restart if @signals.intersect?(STOP_SIGNALS)
      end
      inherit = @listeners.map { |l| "#{l.bind}=#{l.io.fileno}" }.join(",")
      fds = @listeners.to_h { |l| [l.io.fileno, l.io.fileno] }
      env = { Binder::INHERIT_ENV => inherit, Binder::ACTIVATED_ENV => (@listeners.any?(&:activated) ? "1" : nil) }
      exec(env, RbConfig.ruby, *@restart_argv, fds.merge(close_others: false))
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
      worker.stopping = true
      kill(worker, :TERM)
    end

    def free_index
      ((0..@workers.size + @target).to_a - @workers.values.reject(&:mold).map(&:index)).first
    end

    def spawn_worker
      index = free_index
      @config.run_hook(:before_fork, index)
      source = mold
      source&.mold == :ready ? spawn_from_mold(source, index) : fork_worker(index)
    end

    def fork_worker(index)
      beat_r, beat_w = IO.pipe
      ctl, child_ctl = UNIXSocket.pair
      handoff, child_handoff = UNIXSocket.pair(:DGRAM)
      queued = @signals.size
      pid = fork do
        [beat_r, ctl, handoff, @wake_r, @wake_w].each(&:close)
        worker_main(index, queued, beat: beat_w, ctl: child_ctl, handoff: child_handoff)
      end
      [beat_w, child_ctl, child_handoff].each(&:close)
      add_worker(index, pid, beat_r, ctl, handoff)
    end

    # The first code of a forked worker; never returns into the master's code.
    # Until the master's traps are replaced, a signal sent to the new worker
    # runs the master's handler in the child and would be lost (a TERM sent by
    # a stop or restart right after the fork then leaves a worker that serves
    # on while the master waits for it): the signals recorded after +queued+
    # are the child's own, and a stop among them ends it at once.
    def worker_main(index, queued, **channels)
      @workers.each_value { |w| [w.beat, w.ctl, w.handoff].each(&:close) }
      MASTER_SIGNALS.each { |sig| trap(sig, "DEFAULT") }
      trap("HUP", @app_traps["HUP"]) if @app_traps["HUP"].is_a?(Proc)
      exit!(0) if @signals.drop(queued).intersect?(STOP_SIGNALS)
      app = @app || @app_loader.call
      WorkerProcess.new(index: index, app: app, config: @config, log: @log, listeners: @listeners, **channels).run
    rescue SignalException
      exit!(0) # stopped before it could serve: nothing to finish
    rescue Exception => e # rubocop:disable Lint/RescueException -- a child must never return into the master's code
      @log.exception(e.cause || e, "worker #{index} failed to boot")
      exit!(1)
    end

    # Ask the mold for a worker: it answers with the heartbeat pipe, the
    # control socket and the pid.
    def spawn_from_mold(source, index)
      source.ctl.write("fork #{index}\n")
      raise IOError, "the mold did not answer" unless source.ctl.wait_readable(10)

      beat = source.ctl.recv_io
      ctl = source.ctl.recv_io(UNIXSocket)
      handoff = source.ctl.recv_io(UNIXSocket)
      pid = Integer(source.ctl.gets)
      add_worker(index, pid, beat, ctl, handoff)
    rescue IOError, SystemCallError, ArgumentError, TypeError => e
      @log.error("master: forking from the mold failed (#{e.message}): dropping the mold")
      retire(source)
    end

    def add_worker(index, pid, beat, ctl, handoff)
      @workers[pid] = WorkerRecord.new(index: index, pid: pid, beat: beat, ctl: ctl, handoff: handoff,
                                       last_beat: now, booted: false, retiring: false, stopping: false, mold: nil)
    end

    # A saturated worker handed over an idle keep-alive connection: pass it to
    # the next serving worker (round robin), or back if there is no other.
    def forward_connection(from)
      io = from.handoff.recv_io
      others = serving.select(&:booted) - [from]
      target = others.empty? ? from : others[(@next_target = (@next_target || 0) + 1) % others.size]
      target.handoff.send_io(io)
    rescue IOError, SystemCallError => e
      @log.warn("master: keep-alive hand-over failed: #{e.message}")
    ensure
      io&.close
    end

    # Reforking: the warm worker stops serving and becomes the mold; once it
    # is ready, the other workers are replaced by its children one at a time.
    def promote(worker)
      return if worker.nil? || mold || @stopping

      @log.info("master: worker #{worker.index} (pid #{worker.pid}) becomes the mold")
      worker.mold = :pending
      worker.ctl.write("mold\n")
    rescue IOError, SystemCallError
      nil
    end

    def mold_ready(worker)
      worker.mold = :ready
      @log.info("master: mold ready (pid #{worker.pid}); re-forking the workers from it")
      serving.each { |w| w.retiring = true }
    end

    def wait_for_events
      handoffs = @workers.values.reject(&:mold).to_h { |w| [w.handoff, w] }
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

    def check_heartbeats
      @workers.each_value do |w|
        limit = w.booted || w.mold ? @config.worker_timeout : @config.worker_boot_timeout
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

    # Collect exit statuses of direct children (first-generation workers and
    # the mold); the heartbeat pipe's EOF usually told us already.
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
      return if worker.stopping && (status.nil? || status.success?)

      what = worker.mold ? "the mold" : "worker #{worker.index}"
      @log.warn("master: #{what} (pid #{worker.pid}) exited#{status ? ": #{status.inspect}" : ''}") unless @stopping
      return if worker.booted || worker.mold

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
