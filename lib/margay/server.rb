# frozen_string_literal: true

require "stringio" # the engine hands small request bodies to the app as StringIO
require_relative "errors"
require_relative "clock"
require_relative "configuration"
require_relative "log"
require_relative "process/systemd"
require_relative "runner"
require_relative "native"

module Margay
  # A single-process, multi-threaded Rack server: its lifecycle. Ruby owns the
  # listeners, the thread pool and the app; the native engine owns every
  # connection. The parts live in server/: ThreadPool (the threads and their
  # growth policy), RequestHandler (what each thread does; with Hijack and
  # Stream), Supervisor (the main thread's tick), Deadline (request_timeout);
  # fiber mode's (FiberLoop, FiberScheduler, FiberTimers, FiberDeadline) in fibers/.
  #
  #   server = Margay::Server.new(app, config, log: Margay::Log.new)
  #   server.bind    # open listeners (port 0 resolved: see #addresses)
  #   server.run     # serve until #stop; returns after a graceful stop
  class Server
    include Runner

    # app: the Rack application. engine: the Native::Engine from #run on (nil
    # before; closed once #run returns).
    attr_reader :app, :engine

    # @param app [#call] the Rack application
    # @param config [Configuration]
    # @param log [Log]
    # @param listeners [Array<Binder::Listener>, nil] already bound listeners (a
    #   cluster worker's, inherited from the master); nil: bind config.binds
    # @param on_tick [#call, nil] called from the main thread about every 5 ms
    #   while serving (a cluster worker's heartbeat)
    # @param on_stuck [#call, nil] called when a request ignores its
    #   request_timeout interrupt (a cluster worker then replaces itself)
    # @param idle_board [Array(Native::IdleBoard, Integer), nil] a cluster
    #   worker's board and slot: its waiting threads are counted there, and
    #   it balances load only when another worker has a thread free
    # @param health_listeners [Array<Binder::Listener>, nil] a cluster worker's
    #   health listeners, inherited from the master; nil: bind config.health_bind
    def initialize(app, config, log: Log.new(quiet: config.silent), listeners: nil, on_tick: nil, on_stuck: nil,
                   idle_board: nil, health_listeners: nil)
      super(config, log: log, listeners: listeners, health_listeners: health_listeners)
      @idle_board = idle_board
      @app = app
      @owns_listeners = listeners.nil?
      @close_listeners_on_stop = @owns_listeners
      @on_tick = on_tick
      @on_stuck = on_stuck
      @engine = nil
      @pool = nil
      @supervisor = nil
      @counters = { errors: 0 }
      @stop_r, @stop_w = IO.pipe
      @started_at = nil
      @oob_lock = Mutex.new
      @drain_until = nil
    end

    # Serve until #stop is called (or idle_timeout passed without a
    # request). Yields once serving, when a block is given. Returns after
    # in-flight requests finished (or the grace period passed).
    def run
      bind
      # The engine names the settings it reads; their values (and defaults) come from the configuration.
      @engine = Native::Engine.new(@config.to_h.values_at(*Native::Engine::SETTINGS),
                                   RequestHandler.env_template(@config))
      by_io = Native::Engine.respond_to?(:listener_io?) # the pure-Ruby engine takes the IO itself
      @listeners.each do |l|
        @engine.add_listener(by_io ? l.io : l.io.fileno, l.unix, l.server_name, l.server_port, l.tls, l.http2 || false,
                             l.extended_connect || false)
      end
      health_listeners.each { |l| @engine.add_health_listener(by_io ? l.io : l.io.fileno, agent_listener?(l)) }
      @engine.publish_idle(*@idle_board) if @idle_board
      @engine.drain if @drain_until # TERM came while booting
      fibers = fiber_mode?
      # Fiber mode: FiberDeadline (a waiting fiber by its scheduler's timer, a computing one by Thread#raise).
      deadline = ((fibers ? FiberDeadline : Deadline).new(@config.request_timeout, log: @log, on_stuck: @on_stuck) if @config.request_timeout)
      io_bound = IoBound.new(@app) unless fibers # env["puma.mark_as_io_bound"] (fiber mode sets its own)
      handler = RequestHandler.new(io_bound || @app, @engine, @config, @log, @counters, deadline: deadline,
                                   out_of_band: (method(:out_of_band) if @config.hooks[:out_of_band]))
      in_flight = (FiberLoop::InFlight.new(@config.max_in_flight) if fibers)
      work = fibers ? fiber_work(handler, in_flight) : ->(pool) { serve_thread(handler, pool) }
      @started_at = Clock.now # before the pool: #stats reads both once the pool is there
      @pool = ThreadPool.new(min: @config.effective_min_threads, max: @config.max_threads,
                             idle_timeout: @config.thread_idle_timeout, max_io: @config.max_io_threads, log: @log,
                             &work)
      io_bound&.pool = @pool
      ticks = [@on_tick, metrics_publisher&.method(:tick)].compact
      on_tick = ticks.size > 1 ? -> { ticks.each(&:call) } : ticks.first
      @supervisor = Supervisor.new(pool: @pool, engine: @engine, deadline: deadline, on_tick: on_tick,
                                   watchdog: (Systemd.watchdog_interval if @owns_listeners),
                                   idle_timeout: (@config.idle_timeout if @owns_listeners), log: @log,
                                   in_flight: in_flight, due: -> { @drain_until && Clock.now >= @drain_until })
      @engine.start
      @pool.start
      notify("READY=1")
      yield self if block_given?
      @supervisor.run(@stop_r)
      notify("STOPPING=1")
      shutdown
    end

    # Graceful stop: stop accepting, finish requests in flight (bounded by
    # config.shutdown_timeout), close. Safe to call from a signal trap.
    def stop
      @stop_w.write_nonblock(".", exception: false)
      nil
    rescue IOError, Errno::EPIPE # stopped already: the read end is closed
      nil
    end

    # Drain, then stop (trap-safe): not ready from now on (the health answers say 503), every
    # response closes its connection, the listeners keep accepting and every request is served;
    # after +seconds+ the graceful stop (#stop) begins.
    def drain(seconds)
      @drain_until = Clock.now + seconds
      @engine&.drain
      nil
    rescue IOError # the engine is closed: the server has stopped
      nil
    end

    # Between #drain and the graceful stop it leads to.
    def draining?
      !@drain_until.nil? && Clock.now < @drain_until
    end

    # A cluster worker that stops for good closes its copies of the listeners
    # as it stops, like a standalone server (trap-safe). Not so a worker that
    # stops to become the mold: the workers it forks need them.
    def close_listeners_on_stop!
      @close_listeners_on_stop = true
    end

    # A restart in place (single mode) keeps the listeners open as it stops:
    # the process that exec replaces this one with inherits them (trap-safe).
    def keep_listeners_on_stop!
      @close_listeners_on_stop = false
    end

    # The pool's size limits, what Puma's before_thread_start hook receives
    # (its ServerPluginControl).
    ThreadControl = Struct.new(:min_threads, :max_threads)

    # Live counters for the demo app and monitoring. +backlog+: count the
    # requests waiting for a thread and how long the longest-waiting one has
    # waited (oldest_wait_ms; a look at every connection while all threads
    # are busy: for the stats, not for every tick).
    def stats(backlog: true)
      base = { requests: 0, connections: 0, threads: 0, busy_threads: 0, errors: @counters[:errors],
               busy_ms: @supervisor ? @supervisor.busy_ms : 0 }
      return base unless @engine && @pool

      engine = @engine.stats
      waiting, oldest_wait_ms = backlog ? @engine.queue_look : [0, 0]
      base.merge(requests: engine[:requests], abandoned: engine[:abandoned], shed: engine[:shed],
                 backlog: waiting, oldest_wait_ms: oldest_wait_ms, queue_time_seconds: engine[:queue_time_seconds],
                 request_duration_seconds: engine[:request_duration_seconds], connections: engine[:connections],
                 threads: @pool.size, busy_threads: @pool.busy, event_backend: engine[:event_backend],
                 max_connections: engine[:max_connections], uptime: (Clock.now - @started_at).round(1))
    rescue IOError
      base
    end

    # Look at the requests waiting for a thread: [their number, the longest wait in ms]; a
    # cluster worker's engine writes both on the board for GET /queue (Engine#queue_look).
    def queue_look
      @engine ? @engine.queue_look : [0, 0]
    rescue IOError
      [0, 0]
    end

    private

    # What each pool thread runs: the thread hooks around the request loop.
    def serve_thread(handler, pool, fiber_loop = nil)
      @config.run_hook(:before_thread_start, ThreadControl.new(@pool.min, @pool.max), log: @log)
      fiber_loop ? fiber_loop.serve : handler.serve(pool)
    ensure
      @config.run_hook(:before_thread_exit, log: @log)
    end

    # Fiber mode when configured; refused with one line where the engine's event
    # backend is not epoll (the configuration refuses event_backend :poll already; this is
    # :auto on a system without epoll).
    def fiber_mode?
      return false unless @config.fiber_scheduler
      if (h2 = @listeners.find(&:http2))
        raise ConfigError, "bind #{h2.url}: http2=true is served by thread mode only (drop fiber_scheduler or http2)"
      end
      return true if @engine.stats[:event_backend] == "epoll"

      raise ConfigError, "fiber_scheduler: fiber mode needs the epoll event backend (this system's is " \
                         "#{@engine.stats[:event_backend]})"
    end

    # What a fiber-mode pool thread runs: a FiberLoop (one per thread), under the thread hooks.
    def fiber_work(handler, in_flight)
      oob = (method(:out_of_band) if @config.hooks[:out_of_band])
      lambda do |pool|
        fiber_loop = FiberLoop.new(engine: @engine, handler: handler, pool: pool, in_flight: in_flight, log: @log,
                                   out_of_band: oob, interruptible: !@config.request_timeout.nil?)
        serve_thread(handler, pool, fiber_loop)
      end
    end

    # Puma's out_of_band: the hooks run when no request is running; the
    # thread that finished the last one runs them (one at a time; the
    # other threads keep serving meanwhile).
    def out_of_band
      return unless @pool.busy.zero? && @oob_lock.try_lock

      begin
        @config.run_hook(:out_of_band, log: @log)
      ensure
        @oob_lock.unlock
      end
    end

    # GET /metrics on the health listener: this process's Metrics.snapshot, at most once a
    # second, in a standalone server (a cluster's master publishes one for all its workers).
    def metrics_publisher
      return if !@owns_listeners || @idle_board || @config.health_bind.nil?

      require_relative "metrics"
      Metrics::Publisher.new(self) { |text| @engine.metrics_text = text }
    end

    # sd_notify, from a standalone server only (a cluster's master speaks for its workers).
    def notify(state)
      Systemd.notify(state) if @owns_listeners
    end

    # The listeners close as soon as the engine has stopped accepting, so that
    # a client connecting during the grace period is refused at once (and a
    # proxy can retry elsewhere) instead of waiting in the backlog until exit
    # and being reset then. (Sockets another process still holds, a cluster
    # master's during a restart or systemd's, keep listening, as they should.)
    def shutdown
      @engine.stop
      Upgrade.stop_reading(@engine) # upgraded streams' reads end, even when every pool thread is inside one
      close_listeners if @close_listeners_on_stop
      unless @pool.join(grace_period)
        @log.warn("grace period of #{grace_period}s over: closing remaining connections")
        @engine.stop(true)
        @pool.force_stop unless @pool.join(1)
      end
      @engine.close
      health_listeners.each { |l| l.io.close unless l.io.closed? } if @close_listeners_on_stop
      @stop_r.close
      @stop_w.close
      nil
    end

    def close_listeners
      @listeners.each do |l|
        next if l.io.closed?

        l.io.close
        path = l.url.delete_prefix("unix://")
        File.unlink(path) if @owns_listeners && l.unix && !l.activated && File.socket?(path)
      end
    end
  end
end

# The parts, each reopening Server (loaded here, after the class exists, so
# that none of them triggers the autoload of Margay::Server half-way).
require_relative "server/thread_pool"
require_relative "server/request_handler"
require_relative "server/deadline"
require_relative "server/supervisor"
require_relative "fibers/fiber_loop"
require_relative "fibers/fiber_deadline"
require_relative "server/io_bound"
