# frozen_string_literal: true

require_relative "process/allocator"
require_relative "process/bundler_prune"
require_relative "process/lean_heap"
require_relative "process/reexec"
require_relative "runner"
require_relative "errors"
require_relative "configuration"
require_relative "log"
require_relative "native"
require_relative "single"
require_relative "version"

module Margay
  # Runs Margay from a Configuration, in single mode (Single) or cluster mode
  # (Cluster), and does what both modes share: loads the app, writes the
  # pidfile, starts the control app and plugins, prints the banner, and
  # reports the stop. Used by the CLI and by the rackup handler.
  class Launcher
    # Exit status when a second INT cuts the grace period short (128 + SIGINT).
    FORCED_EXIT_STATUS = 130

    # @param config [Configuration]
    # @param log [Log]
    # @param app [#call, nil] the Rack app; nil loads config.rackup (or the demo app)
    # @param app_name [String] how the banner names a given +app+
    # @param rackup_given [Boolean] config.rackup was named explicitly, so a
    #   missing file is an error rather than a reason to serve the demo app
    # @param restart_argv [Array<String>, nil] the command line a hot restart
    #   (USR2) re-executes
    def initialize(config, log: Log.new(quiet: config.silent), app: nil, app_name: "application", rackup_given: false,
                   restart_argv: nil)
      @config = config
      @restart_argv = restart_argv
      @log = log.configured(config)
      @app = app
      @app_name = app_name
      @rackup_given = rackup_given
      @single = nil
      @cluster = nil
      @pid_written = nil
      @ops = nil
    end

    # JRuby has no fork: cluster mode's `workers N` warns and serves in one process, as Puma does there.
    NO_FORK = RUBY_ENGINE == "jruby"
    # glibc arenas beyond one per pool thread: the main thread's (the main arena) and spares
    # for the engine's own threads (Native.malloc_arenas).
    ARENAS_BEYOND_POOL = 3

    # Serve until TERM or INT. Yields the bound server before serving when a
    # block is given (single mode). Returns 0 after a graceful stop.
    # @raise [ConfigError] missing rackup file, cannot bind, cannot write the pidfile
    # @raise [AppLoadError] the rackup file raised
    def run(&block)
      lean = LeanHeap.prepare(@config.lean_heap) # into ENV: the re-executions below carry it
      allocator_warning = Allocator.reexec(@config.jemalloc, @restart_argv) # may exec: before anything else
      prune_warning = BundlerPrune.reexec(@config, @restart_argv, cluster: @config.workers.positive? && !NO_FORK) # may exec too
      lean = LeanHeap.reexec(@restart_argv) if lean == :reexec # may exec too: Ruby reads the ratios as it starts
      Native.malloc_arenas(@config.max_threads + ARENAS_BEYOND_POOL) # before any thread allocates: "Memory" in CONFIGURATION.md
      ENV["RACK_ENV"] = @config.environment
      Dir.chdir(@config.directory) if @config.directory # first: relative redirect paths are the directory's,
      Log.redirect(@config, append: @config.redirect_append || ENV.delete(Reexec::REDIRECTED_ENV)) # on HUP and restart too
      [lean, allocator_warning, prune_warning].compact.each { |warning| @log.warn(warning) }
      if @config.workers.positive? && NO_FORK
        @log.warn("workers #{@config.workers} ignored: #{RUBY_ENGINE} cannot fork; serving in a single " \
                  "process (max_threads sets its parallelism)")
      elsif @config.workers.positive? # the master traps its signals itself (docs/SIGNALS.md)
        require_relative "cluster"
        @cluster = Cluster.new(@config, log: @log, app_loader: -> { load_app.first },
                               restart_argv: @restart_argv, launcher: self)
        return @cluster.launch
      end
      @single = Single.new(self, @config, log: @log, restart_argv: @restart_argv)
      @single.run(&block)
    end

    # The Server once single mode made it (nil before, and in cluster mode).
    def server
      @single&.server
    end

    # Hot restart (USR2), trap-safe. Single mode: finish the requests in
    # flight, then re-execute in place (same pid) with the listeners
    # inherited. Cluster mode: the master's hot restart. Returns false when
    # there is no command line to re-execute (the rackup handler) or nothing runs yet.
    def restart
      return !@cluster.request("USR2").nil? if @cluster && @restart_argv

      @single ? @single.restart : false
    end

    # Phased restart (USR1) in cluster mode; in single mode a restart, as in Puma. Trap-safe.
    def phased_restart
      return restart unless @cluster

      @cluster.request("USR1")
      true
    end

    # Graceful stop (TERM), trap-safe.
    def stop
      @cluster ? @cluster.stop : @single&.stop
      nil
    end

    # What both modes share, called by Single and Cluster#launch (internal).

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
        require_relative "launcher/demo_app"
        demo = DemoApp.new(@config, stats: -> { server ? server.stats : {} },
                                    addresses: -> { server ? server.addresses : @config.binds })
        [demo, "built-in demo app (no #{path} in #{Dir.pwd}; name a rackup file to serve yours)"]
      end
    end

    # The bound +runner+ (a Server or a Cluster) serves from now on: the control
    # app, state file, stats and plugins start (docs/CONTROL.md), the banner and
    # the process title say where it listens. Returns the Operations.
    def announce(runner, description)
      require_relative "control/operations"
      @ops = Operations.start(@config, @log, runner, on_halt: method(:remove_pidfile))
      banner(description, runner.addresses, runner.health_listeners.map { |l| [l.url, runner.agent_listener?(l)] })
      Process.setproctitle(Runner.title(@config, runner.addresses))
      @ops
    end

    # After a graceful stop: the log line and the after_stopped hook. Returns the exit status.
    def stopped
      @log.info("Margay stopped")
      @config.run_hook(:after_stopped, log: @log)
      0
    end

    # Stop what #announce started (once serving is over, whatever ended it).
    def stop_operations
      @ops&.stop
      @ops = nil
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

    private

    def parse_rackup(path)
      require "rack/builder"
      require "rack/utils" # a rackup file finds Rack::Utils loaded, as it did when every master loaded the control app
      # A pruned master's worker: the bundle, as bundle exec set it up. After Rack, already loaded from the
      # bundle's copy (set up first, it made the reforked workers copy 4-6 MiB more of the mold's Ruby heap).
      BundlerPrune.restore(@config)
      Rack::Builder.parse_file(path)
    rescue ScriptError, StandardError
      raise AppLoadError, "cannot load #{path}"
    end

    def banner(description, addresses, health)
      min, max = @config.min_threads, @config.max_threads
      lines = ["Margay #{VERSION} (ruby #{RUBY_VERSION}-p#{RUBY_PATCHLEVEL}) pid #{Process.pid}",
               "* Environment: #{@config.environment}",
               "* App: #{description}",
               "* Threads: #{min}:#{max}",
               "* Allocator: #{Allocator.name}"]
      lines << "* Fibers: a fiber per request, at most #{@config.max_in_flight} in flight" if @config.fiber_scheduler
      lines << "* Workers: #{@config.workers} (preload_app: #{@config.preload_app?})" if @config.workers.positive? && !NO_FORK
      lines << "* Pidfile: #{@config.pidfile}" if @config.pidfile
      lines.concat(addresses.map { |address| "* Listening on #{address}" })
      lines.concat(health.map do |address, agent|
        agent ? "* HAProxy agent on #{address}" : "* Health on #{address} (/livez, /readyz, /metrics)"
      end)
      lines << "Use Ctrl-C to stop"
      @log.info(lines.join("\n"))
    end
  end
end
