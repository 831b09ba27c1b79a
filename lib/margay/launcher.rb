# frozen_string_literal: true

require_relative "binder"
require_relative "runner"
require_relative "errors"
require_relative "configuration"
require_relative "log"
require_relative "version"

module Margay
  # Runs one server process from a Configuration: loads the app, binds, writes
  # the pidfile, prints the banner, turns TERM/INT into a graceful stop and
  # serves until then. Used by the CLI and by the rackup handler.
  class Launcher
    # Exit status when a second INT cuts the grace period short (128 + SIGINT).
    FORCED_EXIT_STATUS = 130

    # The Server once #run bound it (single mode; nil in cluster mode).
    attr_reader :server

    # @param config [Configuration]
    # @param log [Log]
    # @param app [#call, nil] the Rack app; nil loads config.rackup (or the demo app)
    # @param app_name [String] how the banner names a given +app+
    # @param rackup_given [Boolean] config.rackup was named explicitly, so a
    #   missing file is an error rather than a reason to serve the demo app
    # @param restart_argv [Array<String>, nil] the command line a cluster master
    #   re-executes on USR2 (hot restart)
    def initialize(config, log: Log.new(quiet: config.silent), app: nil, app_name: "application", rackup_given: false,
                   restart_argv: nil)
      @config = config
      @restart_argv = restart_argv
      @log = log.configured(config)
      @app = app
      @app_name = app_name
      @rackup_given = rackup_given
      @server = nil
      @cluster = nil
      @pid_written = nil
      @restart = nil
      @stop_requested = false
    end

    # Serve until TERM or INT. Yields the bound server before serving when a
    # block is given. Returns 0 after a graceful stop.
    # @raise [ConfigError] missing rackup file, cannot bind, cannot write the pidfile
    # @raise [AppLoadError] the rackup file raised
    def run(&block)
      ENV["RACK_ENV"] = @config.environment
      Dir.chdir(@config.directory) if @config.directory # first: relative redirect paths are the directory's,
      Log.redirect(@config, append: @config.redirect_append || ENV.delete(Runner::REDIRECTED_ENV)) # on HUP and restart too
      return run_cluster if @config.workers.positive?

      run_single(&block)
    end

    # Hot restart (USR2), trap-safe. Single mode: finish the requests in
    # flight, then re-execute in place (same pid) with the listeners
    # inherited. Cluster mode: the master's hot restart. Returns false when
    # there is no command line to re-execute (the rackup handler) or nothing runs yet.
    def restart
      return false unless @restart_argv && (@cluster || @server)
      return !@cluster.request("USR2").nil? if @cluster
      return false if @stop_requested # a stop wins over a restart, whichever came first

      @restart = true
      @server.keep_listeners_on_stop!
      @server.stop
      true
    end

    # Phased restart (USR1) in cluster mode; in single mode a restart, as in Puma. Trap-safe.
    def phased_restart
      return restart unless @cluster

      @cluster.request("USR1")
      true
    end

    # Graceful stop (TERM), trap-safe.
    def stop
      @cluster ? @cluster.stop : @server&.stop
      nil
    end

    private

    def run_single
      previous = trap_signals # before the app loads, as Puma: a signal during boot is not fatal
      close_inherited_connections
      warn_cluster_hooks
      app, description = load_app
      require_relative "server"
      @server = Server.new(app, @config, log: @log)
      @server.stop if @stop_requested # TERM/INT/HUP arrived while the app loaded
      @server.bind
      write_pidfile
      @ops = operations(@server)
      banner(description, @server.addresses)
      set_title(@server.addresses)
      yield @server if block_given?
      @ops.booted # plugins' after_booted
      @server.run { @config.run_hook(:after_booted, log: @log) }
      return restart! if @restart

      @log.info("Margay stopped")
      @config.run_hook(:after_stopped, log: @log)
      0
    ensure
      @ops&.stop
      previous&.each { |signal, handler| Signal.trap(signal, handler || "DEFAULT") }
      remove_pidfile unless @restart
    end

    # The requests in flight are done and the listeners still open: become
    # the new process. If exec fails the listeners are closed and the process
    # exits 1 (it has stopped serving).
    def restart!
      @log.info("Margay restarting in place (pid #{Process.pid})")
      Systemd.notify("RELOADING=1")
      Operations.fire(:before_restart) # plugins' event, whoever asked for the restart
      @config.run_hook(:before_restart, self, log: @log)
      @server.reexec(@restart_argv)
    rescue SystemCallError => e
      @log.error("restart failed: cannot re-execute (#{e.message}); stopping")
      @server.listeners.each { |l| l.io.close unless l.io.closed? }
      remove_pidfile
      1
    end

    # Puma prints the same: these hooks run only in cluster mode.
    def warn_cluster_hooks
      @config.cluster_only_hooks.each do |name|
        @log.warn("the #{name} hook only runs in cluster mode (workers > 0): it will not run in this single process")
      end
    end

    def set_title(addresses)
      Process.setproctitle(Runner.title(@config, addresses))
    end

    # Cluster mode: the master binds, (pre)loads and supervises; it traps the
    # signals itself (docs/SIGNALS.md).
    def run_cluster
      require_relative "cluster"
      description = nil
      loader = lambda do
        app, description = load_app
        app
      end
      cluster = @cluster = Cluster.new(@config, log: @log, app_loader: loader, restart_argv: @restart_argv, launcher: self)
      cluster.bind
      write_pidfile
      app = loader.call if @config.preload_app? # load errors surface here, before any fork
      @ops = operations(cluster)
      banner(description || "#{@config.rackup} (loaded by each worker)", cluster.addresses)
      set_title(cluster.addresses)
      cluster.run(preloaded_app: app)
      @log.info("Margay stopped")
      @config.run_hook(:after_stopped, log: @log)
      0
    ensure
      @ops&.stop
      remove_pidfile
    end

    # Control app, state file, stats, plugins (docs/CONTROL.md).
    def operations(runner)
      require_relative "operations"
      Operations.start(@config, @log, runner, on_halt: method(:remove_pidfile))
    end

    # A hot restart from cluster mode into single mode: the connections the old
    # master held for its workers have nobody to serve them here.
    def close_inherited_connections
      return unless ENV.key?(Binder::INHERIT_CONNECTIONS_ENV)

      require_relative "cluster/balancer"
      Cluster::Balancer::Forwarder.close_inherited
    end

    # Returns [app, description for the banner].
    def load_app
      return [@app, @app_name] if @app
      return [@config.app, "#{@config.app.class} (the config's app)"] if @config.app

      path = @config.rackup
      if File.file?(path)
        [parse_rackup(path), path]
      elsif @rackup_given || File.exist?(path)
        raise ConfigError, File.exist?(path) ? "rackup file #{path} is not a file" : "rackup file #{path} not found"
      else
        require_relative "demo_app"
        demo = DemoApp.new(@config, stats: -> { @server ? @server.stats : {} },
                                    addresses: -> { @server ? @server.addresses : @config.binds })
        [demo, "built-in demo app (no #{path} in #{Dir.pwd}; name a rackup file to serve yours)"]
      end
    end

    def parse_rackup(path)
      require "rack/builder"
      Rack::Builder.parse_file(path)
    rescue ScriptError, StandardError
      raise AppLoadError, "cannot load #{path}"
    end

    def banner(description, addresses)
      min, max = @config.min_threads, @config.max_threads
      lines = ["Margay #{VERSION} (ruby #{RUBY_VERSION}-p#{RUBY_PATCHLEVEL}) pid #{Process.pid}",
               "* Environment: #{@config.environment}",
               "* App: #{description}",
               "* Threads: #{min}:#{max}"]
      lines << "* Fibers: a fiber per request, at most #{@config.max_in_flight} in flight" if @config.fiber_scheduler
      lines << "* Workers: #{@config.workers} (preload_app: #{@config.preload_app?})" if @config.workers.positive?
      lines << "* Pidfile: #{@config.pidfile}" if @config.pidfile
      lines.concat(addresses.map { |address| "* Listening on #{address}" })
      lines << "Use Ctrl-C to stop"
      @log.info(lines.join("\n"))
    end

    # Single mode, as Puma's: TERM and INT stop gracefully (a second INT
    # exits at once); USR2 and USR1 restart in place; HUP reopens the
    # redirected stdout/stderr, or stops gracefully when nothing is
    # redirected. Returns the previous handlers so that #run can put them back.
    def trap_signals
      interrupted = false
      previous = {}
      previous["TERM"] = Signal.trap("TERM") { graceful_stop("TERM") }
      previous["INT"] = Signal.trap("INT") do
        force_exit if interrupted
        interrupted = true
        graceful_stop("INT")
      end
      previous["USR2"] = Signal.trap("USR2") { restart_signal("USR2") }
      previous["USR1"] = Signal.trap("USR1") { restart_signal("USR1") }
      previous["HUP"] = Signal.trap("HUP") { hangup }
      if (sig = Runner::BACKTRACE_SIGNAL) # logging takes locks a trap may not: a thread does it
        previous[sig] = Signal.trap(sig) do
          Thread.new { @log.thread_backtraces }
        rescue ThreadError # no thread to be had (a pids limit): no backtraces this time
          nil
        end
      end
      previous
    end

    def restart_signal(signal)
      phased = " (no phased restart in single mode: restarting)" if signal == "USR1"
      return say("SIG#{signal} ignored: no command line to re-execute") unless @restart_argv

      say("SIG#{signal} received#{phased}: finishing requests in flight, then restarting in place")
      restart
    end

    # Reopening files takes locks a trap may not: a thread does it.
    def hangup
      return graceful_stop("HUP") unless @config.redirect_stdout || @config.redirect_stderr

      Log.reopen_later(@config, @log, "")
    end

    # Trap context: no mutexes. Server#stop is trap-safe; the log line is best effort.
    def graceful_stop(signal)
      @stop_requested = true
      restarting = @restart
      @restart = false # a restart under way becomes a stop (as in a cluster)
      return say("SIG#{signal} received while booting: stopping once booted") unless @server

      say("SIG#{signal} received: stopping gracefully (up to #{@server.grace_period}s for requests in flight" \
          "#{'; Ctrl-C again to force' if signal == 'INT'})")
      @server.close_listeners_on_stop! if restarting # they were to stay open for the new process
      @server.stop
    end

    def force_exit
      say("Second SIGINT: exiting without waiting")
      remove_pidfile
      Process.exit!(FORCED_EXIT_STATUS)
    end

    def say(message)
      @log.info(message)
    rescue ThreadError
      nil # the log stream's lock was held by the interrupted code; the stop matters more
    end

    def write_pidfile
      path = @config.pidfile
      return unless path

      File.write(path, "#{Process.pid}\n")
      @pid_written = path
    rescue SystemCallError => e
      raise ConfigError, "cannot write pidfile #{path}: #{e.message.sub(/ @ \w+/, '')}"
    end

    # Remove the pidfile only if it is still ours (a newer process may own it).
    def remove_pidfile
      path = @pid_written
      return unless path

      @pid_written = nil
      File.unlink(path) if File.read(path).to_i == Process.pid
    rescue SystemCallError
      nil # already gone
    end
  end
end
