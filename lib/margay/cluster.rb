# frozen_string_literal: true

require "rbconfig"
require "set"
require_relative "native"
require_relative "runner"
require_relative "process/binder"
require_relative "clock"
require_relative "log"
require_relative "process/systemd"
require_relative "cluster/back_off"
require_relative "cluster/balancer"
require_relative "cluster/exits"
require_relative "cluster/health"
require_relative "cluster/heap"
require_relative "cluster/restarts"
require_relative "cluster/roster"
require_relative "cluster/queue_report"
require_relative "metrics"
require_relative "cluster/signals"
require_relative "cluster/spawner"
require_relative "control/operations"

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
  #
  # The rooms of cluster mode, under cluster/: Signals (the master's signal
  # inbox), Roster and WorkerRecord (its workers), Spawner (making workers),
  # BackOff (after boot failures), Exits (a worker gone: reaping, forgetting,
  # after_worker_shutdown), Health (heartbeat, memory and idle checks),
  # Channel (the master<->worker protocol), Worker and Mold (the child side),
  # Balancer (keep-alive balancing, both sides).
  class Cluster
    include Runner

    BOARD_SLOTS = 256 # worker indexes that can report idle threads (see Native::IdleBoard)
    LOOP_PAUSE = 0.1 # seconds before the next turn when the loop's wait failed

    # @param config [Configuration] with workers > 0
    # @param log [Log]
    # @param app_loader [#call] returns the Rack app (called in the master when
    #   preloading, else in each worker)
    # @param restart_argv [Array<String>] the command line re-executed on USR2
    # @param launcher [Launcher, nil] what the before_restart hook receives (as in Puma), and
    #   what #launch has do the steps both modes share
    def initialize(config, log:, app_loader:, restart_argv: nil, launcher: nil)
      super(config, log: log)
      @app_loader = app_loader
      @restart_argv = restart_argv
      @launcher = launcher
      @workers = Roster.new
      @target = config.workers
      @signals = Signals.new
      @stopping = false
      @drain_until = nil # drain_delay: when the drain that TERM began ends in the graceful stop
      @back_off = BackOff.new(log: log)
      @board = Native::IdleBoard.new(BOARD_SLOTS) # shared with every worker forked from now on
      @forwarder = Balancer::Forwarder.new(roster: @workers, board: @board, log: log)
      @exits = Exits.new(config: config, log: log, roster: @workers, forwarder: @forwarder, board: @board,
                         back_off: @back_off)
      @health = Health.new(config: config, log: log)
      @spawner = nil
      @phase = 0 # phased restarts so far (stats)
      @auto_reforked = false # refork_after reforks once per generation (as Puma's fork_worker, in phase 0)
      @seeded = false # mold_boot: the first worker became the mold (seeding?)
      @loop_errors = Set.new # where each error the loop carried on past came from (said once each)
      @signals.trap_all # from now on: a signal during bind or preload is not lost, nor fatal
    end

    # Run until TERM/INT/QUIT; returns after every worker has exited.
    # @param preloaded_app [#call, nil] the app, when the caller preloaded it
    def run(preloaded_app: nil)
      bind
      Native.child_subreaper
      app = preloaded_app || (@app_loader.call if @config.preload_app?)
      Stats.memory_source = self
      @spawner = Spawner.new(config: @config, log: @log, listeners: @listeners, roster: @workers, signals: @signals,
                             board: @board, app: app, app_loader: @app_loader, forwarder: @forwarder,
                             health_listeners: health_listeners)
      @signals.trap_all # again: a handler the app set while loading (HUP, say) is kept for the workers
      hook(:before_fork, nil) # once, before the first workers (Puma's moment)
      Heap.settle(compact: @config.compact_before_fork, room: @config.heap_room_before_fork, log: @log, who: "master") if app # the workers share it
      # GET /metrics on the health listener, which every worker answers from the board: the cluster's figures.
      @publisher = (Metrics::Publisher.new(self) { |text| @board.metrics_text = text } if @config.health_bind)
      supervise until @stopping && @workers.empty?
      close_listeners
      @exits.report(flush: true)
    end

    # Cluster mode under its Launcher, which does what both modes share: bind,
    # write the pidfile, preload the app (its load errors surface here, before
    # any fork), start the control app and print the banner, then #run.
    # Returns the exit status.
    def launch
      bind
      @launcher.write_pidfile
      app, description = @launcher.load_app if @config.preload_app?
      @launcher.announce(self, description || "#{@config.rackup} (loaded by #{@config.mold_boot ? 'the first worker, the mold of the others' : 'each worker'})")
      run(preloaded_app: app)
      @launcher.stopped
    ensure
      @launcher.stop_operations
      @launcher.remove_pidfile
    end

    # Puma-shaped stats (docs/CONTROL.md), from any thread: to_a copies the roster in one C call.
    def stats
      Stats.cluster(@workers.to_a.reject(&:mold?).map { |w| w.to_stats(@phase) }, @phase)
    end

    # What Metrics renders (Metrics.snapshot): the stats with each worker's
    # whole last status (Margay's counters beside Puma's), the restarts per
    # worker slot (Roster#restarts) and the clients in the TCP listeners'
    # accept queues (nil without a TCP listener). From any thread.
    def metrics_stats
      Stats.cluster(@workers.to_a.reject(&:mold?).map { |w| w.to_stats(@phase, all: true) }, @phase)
           .merge(worker_restarts: @workers.restarts, listen_queue: Metrics.listen_queue(@listeners))
    end

    # How the waiting work is spread over the workers, live (QueueReport: GET /queue).
    def queue
      QueueReport.report(workers: @workers.to_a.reject(&:mold?), board: @board, listeners: @listeners || [])
    end

    # Memory of every process of the cluster (Stats.memory_report), from any
    # thread: the master's own, each worker's from its last status, the mold's.
    def memory
      Stats.memory_report(workers: @workers.to_a.map(&:to_memory))
    end

    # Graceful stop of the whole cluster (trap-safe).
    def stop
      @signals.request("TERM")
    end

    # Ask for what +sig+ (a name of Signals::MASTER) does, as if it had
    # arrived: "USR2" a hot restart, "USR1" a phased one (trap-safe).
    def request(sig)
      @signals.request(sig)
    end

    private

    # One turn of the master's loop. The master outlives any one error: each step is guarded
    # on its own, so one that keeps failing neither ends the master (and the cluster) nor
    # keeps the others from running: signals are still handled, exits reaped, a stop still
    # forced at its deadline. Each known way to fail is handled where it happens; an error
    # not yet known is said once per class and place.
    def supervise
      unless @stopping
        guarded { maintain }
        guarded { @forwarder.place_held }
        guarded { begin_stop if @health.idle_too_long?(@workers) }
        guarded { begin_stop if @drain_until && Clock.now >= @drain_until }
        guarded { @publisher&.tick }
      end
      sleep LOOP_PAUSE unless guarded { wait_for_events || true } # no spin on a failing wait
      while (sig = @signals.shift) # one at a time: a restart may look at what follows
        guarded { handle_signal(sig) }
      end
      guarded { @exits.reap(stopping: @stopping) }
      guarded { @exits.report }
      guarded { @health.check_heartbeats(@workers, grace: grace_period) }
      guarded { @health.check_memory(@workers) { |w| retire(w) } }
      guarded { watchdog_ping }
      guarded { force_stop } if @stopping && Clock.now > @stop_deadline
    end

    # One step of the loop: its value, or nil when it raised (said once per class and place).
    def guarded(&)
      @log.guard("master: carrying on after an error (said once)", @loop_errors, &)
    end

    # ---- workers ----

    def maintain
      mold = @workers.mold
      return if mold&.pending_mold? # wait until the mold can fork

      step_phased_restart
      return resume_mold(mold) if mold && reforked?
      # A ready mold serves again once the others are re-forked: it counts.
      return if @workers.serving.size + (mold ? 1 : 0) >= @target || @back_off.waiting?
      return if seeding?

      spawn_worker
    end

    # mold_boot, until the first worker has booted and become the mold: the
    # others wait to be forked from it (one worker loads the app, the master never).
    def seeding?
      @config.mold_boot && !@seeded && !@stopping && @workers.any?
    end

    def spawn_worker
      index = @workers.free_index(@target)
      mold = @workers.mold
      if mold&.ready_mold?
        retire(mold) unless @spawner.order_from_mold(mold, index) # the mold runs the fork hooks itself
      else
        hook(:before_worker_fork, index)
        @spawner.fork_child(index) { hook(:after_worker_fork, index) }
      end
    rescue SystemCallError => e # fork: EAGAIN (process limit), ENOMEM; pipes: EMFILE
      @log.error("master: cannot start worker #{index}: #{e.message}")
      @back_off.failed!
    end

    # Stop +worker+ to replace it (a phased restart, TTOU, its memory): with drain_delay a
    # serving worker drains first (unready, connection: close; the others serve on), so that
    # a balancer's kept-alive connections to it close after a response instead of while idle.
    def retire(worker)
      drain = @config.drain_delay
      return stop_worker(worker) unless drain.positive? && worker.booted? && !worker.mold? && !worker.stopping?

      worker.stopping!(Clock.now + drain) # its grace period starts once the drain is over
      worker.channel.ask_to_drain
      @log.info("master: worker #{worker.index} (pid #{worker.pid}) draining for #{drain}s, then stopping")
    rescue SystemCallError, IOError # it is gone: its exit is reaped as usual
      stop_worker(worker)
    end

    def stop_worker(worker)
      worker.stopping!(Clock.now)
      worker.kill(:TERM)
    end

    def wait_for_events(within = nil)
      handoffs = @workers.to_h { |w| [w.channel.handoff, w] } # also a pending mold's: what it sent before it knew
      beats = @workers.map { |w| w.channel.beat }
      within ||= @drain_until && !@stopping ? @drain_until - Clock.now : 0.5
      wait = @forwarder.held.positive? ? 0.01 : within.clamp(0.01, 0.5) # held connections: look again soon
      ready, = IO.select([@signals.wake, *beats, *handoffs.keys], nil, nil, wait)
      (ready || []).each do |io|
        next if io.closed? # a worker forgotten earlier in this round (its hand-overs were drained then)

        if io == @signals.wake
          @signals.drain_wake
        elsif handoffs[io]
          @forwarder.forward(handoffs[io])
        else
          record_beat(io)
        end
      end
    end

    def record_beat(io)
      worker = @workers.by_beat(io)
      return unless worker

      reports = worker.channel.read_reports
      return @exits.forget(worker, nil, stopping: @stopping) if reports.nil? # EOF: the process is gone
      return unless reports

      worker.last_beat = Clock.now
      booted(worker) if reports.include?(:booted) && !worker.booted?
      @auto_reforked ||= promote(worker) if reports.include?(:refork_due) && @config.refork_after && !@auto_reforked
      mold_ready(worker) if reports.include?(:mold_ready)
    end

    def booted(worker)
      worker.booted!
      @back_off.booted!
      @log.info("master: #{worker} booted")
      @seeded ||= promote(worker) if @config.mold_boot # it forks the others (seeding?)
      return if @ready || @workers.serving.count(&:booted?) < @target

      Operations.fire(:after_booted, once: true) # plugins' event
      @ready = Systemd.notify("READY=1") || true # once every worker of a generation serves
      hook(:after_booted) # Puma's moment: every worker booted, at start and after each phased restart
    end

    # ---- reforking ----

    # The warm worker stops serving and becomes the mold; once it is ready,
    # the other workers are replaced by its children one at a time, then it
    # serves again (#resume_mold). A worker on its way out (a phased restart
    # replacing old code) never becomes it. true when it was asked.
    def promote(worker)
      return false if worker.nil? || worker.retiring? || worker.stopping? || @workers.mold || @stopping

      @log.info("master: #{worker} becomes the mold")
      worker.mold_pending!
      worker.channel.ask_to_become_mold
      true
    rescue IOError, SystemCallError
      false
    end

    # Every other worker is the mold's child, serving: nothing is left to fork.
    def reforked?
      serving = @workers.serving
      serving.size + 1 >= @target && serving.none?(&:retiring?) && serving.all?(&:booted?)
    end

    # The ready mold serves again as the worker it was (Puma's worker 0
    # after a refork): no process is left holding the template's heap idle.
    # A worker lost from now on is forked by the master, until the next refork.
    def resume_mold(mold)
      @log.info("master: workers re-forked; the mold (pid #{mold.pid}) serves again as worker #{mold.index}")
      mold.channel.ask_to_serve
      mold.serves_again!(Clock.now)
    rescue IOError, SystemCallError
      retire(mold)
    end

    def mold_ready(worker)
      return worker.kill(:TERM) if worker.stopping? # told to stop while it was draining

      worker.mold_ready!
      @log.info("master: mold ready (pid #{worker.pid}); re-forking the workers from it")
      @workers.serving.each(&:retire_later!)
    end

    # ---- the systemd watchdog (the workers' health: Health) ----

    def watchdog_ping
      interval = Systemd.watchdog_interval
      return unless interval && Clock.now >= (@next_watchdog ||= 0)

      Systemd.notify("WATCHDOG=1")
      @next_watchdog = Clock.now + interval
    end

    # A user hook run in the master: its failure is logged, never fatal to the master.
    def hook(name, *args)
      @config.run_hook(name, *args, log: @log)
    end
  end
end
