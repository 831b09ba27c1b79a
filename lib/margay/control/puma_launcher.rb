# frozen_string_literal: true

require_relative "../runner" # TLS_RELOAD_SIGNAL
require_relative "../stats"
require_relative "../metrics"

module Margay
  # What Puma's Launcher offers to the control app and to Puma plugins, over
  # Margay: stats, the actions (each the signal Margay already answers,
  # docs/SIGNALS.md), the lifecycle events, the log and the options.
  class PumaLauncher
    # Puma's lifecycle events (Puma::Events): plugins register blocks, the
    # server fires them. Puma 7 renamed on_* to after_booted, before_restart
    # and after_stopped; both names work here. A block that raises is logged.
    class Events
      NAMES = %i[after_booted before_restart after_stopped].freeze

      def initialize(log)
        @log = log
        @hooks = Hash.new { |h, k| h[k] = [] }
        @fired = {}
      end

      # Register +obj+ (a callable) or the block for +hook+. Returns it.
      def register(hook, obj = nil, &block)
        raise ArgumentError, "give either an object or a block, not both" if obj && block

        (@hooks[hook.to_sym] << (obj || block)).last
      end

      def after_booted(&block) = register(:after_booted, &block)
      def before_restart(&block) = register(:before_restart, &block)
      def after_stopped(&block) = register(:after_stopped, &block)
      alias on_booted after_booted
      alias on_restart before_restart
      alias on_stopped after_stopped

      # Call every block registered for +hook+; one that raises is logged, the others still run.
      def fire(hook, *args)
        @fired[hook] = true
        @hooks[hook].each do |callable|
          callable.call(*args)
        rescue StandardError, ScriptError => e
          @log.exception(e, "#{hook} event handler failed")
        end
      end

      # Fire +hook+ unless it was fired before (after_booted: once per process).
      def fire_once(hook, *args)
        fire(hook, *args) unless @fired[hook]
      end

      def fire_after_booted! = fire(:after_booted)
      def fire_before_restart! = fire(:before_restart)
      def fire_after_stopped! = fire(:after_stopped)
    end

    # Puma's log_writer: what plugins log through.
    class LogWriter
      def initialize(log)
        @log = log
      end

      def log(message) = @log.info(message.to_s)
      alias write log
      alias puts log
      def error(message) = @log.error(message.to_s)
      def debug(message) = (@log.info(message.to_s) if ENV["PUMA_DEBUG"] || ENV["MARGAY_DEBUG"])
      def stdout = @log.out
      def stderr = @log.err
    end

    # Puma's options hash, read by plugins: Puma's names answered from the
    # Configuration (Puma's name where it differs), plus what plugins set.
    class Options
      PUMA_NAMES = { control_auth_token: :control_token, state: :state_path, binds: :binds,
                     pidfile: :pidfile, worker_shutdown_timeout: :shutdown_timeout,
                     persistent_timeout: :keepalive_timeout, first_data_timeout: :header_timeout,
                     rackup: :rackup, environment: :environment, tag: :tag }.freeze

      def initialize(config, overrides)
        @config = config
        @extra = overrides
      end

      def [](key)
        key = key.to_sym
        return @extra[key] if @extra.key?(key)

        name = PUMA_NAMES.fetch(key, key)
        @config.public_send(name) if Configuration::SETTINGS.include?(name)
      end

      def []=(key, value)
        @extra[key.to_sym] = value
      end

      def fetch(key, *default)
        return @extra[key.to_sym] if @extra.key?(key.to_sym)

        value = self[key]
        return value unless value.nil?
        return yield(key) if block_given?
        return default.first unless default.empty?

        raise KeyError, "key not found: #{key.inspect}"
      end

      def key?(key) = !self[key].nil?

      def to_h
        Configuration::SETTINGS.to_h { |name| [name, @config.public_send(name)] }
                               .merge(control_auth_token: self[:control_auth_token]).merge(@extra)
      end
    end

    attr_reader :events, :log_writer, :options, :config

    # @param config [Configuration]
    # @param log [Log]
    # @param runner [Server, Cluster] what serves in this process
    # @param control [Hash] control_url: the control app's URL, token: its token (nil: none)
    # @param on_halt [#call] cleanup before an immediate exit (state file, pidfile)
    def initialize(config:, log:, runner:, control: {}, on_halt: nil)
      @config = config
      @log = log
      @runner = runner
      @on_halt = on_halt
      @events = Events.new(log)
      @log_writer = LogWriter.new(log)
      @options = Options.new(config, { control_url: control[:url], control_auth_token: control[:token] || "none",
                                       workers: config.workers, min_threads: config.min_threads,
                                       max_threads: config.max_threads, preload_app: config.preload_app? })
    end

    # Cluster mode: this process is the master.
    def clustered?
      @config.workers.positive?
    end

    # Puma-shaped stats of this process (Stats).
    def stats
      return @runner.stats if clustered?

      Stats.single(@runner.stats, @config.max_threads)
    end

    # Prometheus metrics of this process (Metrics.snapshot): Margay.metrics.
    def metrics
      Metrics.snapshot(@runner)
    end

    # Graceful stop (TERM).
    def stop
      signal(:TERM)
    end

    # Exit now: requests in flight are dropped; cluster workers notice the
    # master is gone at their next heartbeat, finish their requests and exit.
    def halt
      @log.info("halt requested: exiting at once")
      @on_halt&.call
      Process.exit!(0)
    end

    # Restart in place (USR2): a single process restarts, a cluster master
    # re-executes itself with its listeners (hot restart).
    def restart
      signal(:USR2) # the restart fires before_restart itself (Launcher#restart!, Cluster's hot restart)
    end

    # Cluster: replace workers one at a time (USR1). Single mode has no
    # phases: like Puma, it restarts instead.
    def phased_restart
      return signal(:USR1) if clustered?

      @log.info("phased restart not available in single mode: restarting instead")
      restart
    end

    # The TLS listeners' certificates read again (ALRM; a cluster master passes it to its workers).
    def reload_certificates
      signal(Runner::TLS_RELOAD_SIGNAL.to_sym)
    end

    # Cluster: refork the workers from a warm mold (URG); false in single mode.
    def refork
      clustered? && signal(:URG)
    end

    # Every thread of this process: yields (or returns) [name, backtrace] pairs.
    def thread_status
      list = Thread.list.map do |thread|
        name = +"Thread: TID-#{thread.object_id.to_s(36)}"
        name << " #{thread.name}" if thread.name
        [name, thread.backtrace || ["<no backtrace available>"]]
      end
      return list unless block_given?

      list.each { |name, backtrace| yield name, backtrace }
    end

    private

    def signal(sig)
      Process.kill(sig, Process.pid)
      true
    end
  end
end
