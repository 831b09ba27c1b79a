# frozen_string_literal: true

require "securerandom"
require_relative "../stats"
require_relative "puma_launcher"
require_relative "plugins"
require_relative "listener"
require_relative "state_file"

module Margay
  # Puma's operational surface around the process that serves (the single
  # server, or the cluster master): the stats source, the control app, the
  # state file and the plugins (docs/CONTROL.md). The Launcher starts it
  # once bound and stops it once the serving is over; the cluster master
  # fires the events that only it can see (Operations.fire).
  class Operations
    @current = nil

    class << self
      # The Operations of this process (nil: none started).
      attr_reader :current

      # Start them for +runner+ (a Server or the Cluster). Returns them.
      # @raise [ConfigError] the control app cannot bind, the state file cannot be written
      def start(config, log, runner, on_halt: nil)
        ops = new(config, log, runner, on_halt: on_halt)
        ops.start
        @current = ops
      end

      # Fire a PumaLauncher event in this process, if Operations run here.
      # once: only the first time (after_booted).
      def fire(hook, once: false)
        events = @current&.launcher&.events
        return unless events

        once ? events.fire_once(hook) : events.fire(hook)
      end

      # Forget the current one (stopped).
      def clear(ops)
        @current = nil if @current.equal?(ops)
      end
    end

    # The PumaLauncher that the control app and the plugins use.
    attr_reader :launcher

    # The control app's listener (nil: no control_url).
    attr_reader :control

    def initialize(config, log, runner, on_halt: nil)
      @config = config
      @log = log
      @runner = runner
      @on_halt = on_halt
      @control = nil
      @state = nil
      @launcher = nil
    end

    def start
      Stats.started_at = Time.now
      token = control_token
      @control = Control::Listener.new(@config.control_url, log: @log) if @config.control_url
      @state = Control::StateFile.new(@config.state_path) if @config.state_path
      @launcher = PumaLauncher.new(config: @config, log: @log, runner: @runner,
                                   control: { url: @control&.url, token: token }, on_halt: method(:halt_cleanup))
      Stats.source = @launcher
      start_control(token)
      @state&.write(control_url: @control&.url, token: token || ("none" if @control))
      Plugins.start(@config.plugins, @launcher, @log)
      Plugins.bridge_stats # also without plugins: an app may read Puma.stats
      self
    rescue StandardError
      stop
      raise
    end

    # The server serves: after_booted (single mode; a cluster master fires it
    # once every worker has booted).
    def booted
      @launcher.events.fire_once(:after_booted)
    end

    # The serving is over: after_stopped, then the control app and the state file go.
    def stop
      @launcher&.events&.fire(:after_stopped)
      @control&.stop
      @state&.remove
      Stats.source = nil if Stats.source.equal?(@launcher)
      self.class.clear(self)
    end

    private

    # nil: none asked for ("none"); a random one when none is given (written
    # to the state file, never to the log, like Puma).
    def control_token
      token = @config.control_token
      return nil if token == "none" # Configuration refuses "": an unset variable never means "no token"

      token || (@generated_token = SecureRandom.hex(16))
    end

    def start_control(token)
      return unless @control

      require_relative "app" # with Rack::Utils: loaded only where a control server runs (not in every master)
      @control.start(Control::App.new(@launcher, token: token))
      @log.info("* Starting control server on #{@control.url}")
      return unless @generated_token

      if @state
        @log.info("* Control token: generated, in #{@state.path} (pumactl -S #{@state.path})")
      else
        @log.warn("the control app's token was generated at random and there is no state file to read it from: " \
                  "set control_token (or state_path) to use the control app")
      end
    end

    def halt_cleanup
      @state&.remove
      @on_halt&.call
    end
  end
end
