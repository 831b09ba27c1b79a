# frozen_string_literal: true

require_relative "../stats"

module Margay
  # Puma plugins (`plugin :tmp_restart`): a file puma/plugin/NAME.rb on the
  # load path calls Puma::Plugin.create { def start(launcher) ... }; Margay
  # loads it and starts it with a PumaLauncher.
  #
  # Which Puma::Plugin: the puma gem's own puma/plugin.rb when the bundle
  # has the gem (it loads that one file and puma/const.rb, never Puma's
  # server), else Margay's shim (lib/margay/control/puma_shim, put on the load path
  # then), which has the same registry and its own tmp_restart. Either way
  # in_background runs its block in a thread Margay starts and logs, and
  # Puma.stats / Puma.stats_hash answer Margay's stats.
  #
  # A plugin that cannot load or start (a gem missing, something Margay
  # lacks) costs one warning line naming it, never the start.
  module Plugins
    SHIM_DIR = File.expand_path("puma_shim", __dir__)

    # in_background, run by Margay: a named thread whose failure is logged.
    module Background
      def in_background(&block)
        Plugins.background(self.class.name || "plugin", &block)
      end
    end

    @log = nil
    @started = false
    @pending = []
    @threads = []

    class << self
      # Threads started by in_background (tests join or inspect them).
      attr_reader :threads

      # Load and start the plugins named +names+ with +launcher+ (a
      # PumaLauncher). Returns the names that started.
      def start(names, launcher, log)
        @log = log
        return [] if names.empty?

        install_puma_api
        plugins = names.filter_map { |name| find(name.to_s) }
        started = plugins.filter_map { |name, plugin| name if start_one(name, plugin, launcher) }
        @started = true
        @pending.each { |name, block| spawn(name, block) }
        @pending.clear
        started
      end

      # Whether the Puma plugin API here is the puma gem's (true) or Margay's shim.
      def puma_gem?
        defined?(::Puma::Plugin) && !::Puma::Plugin.const_defined?(:MARGAY_SHIM, false)
      end

      # Run +block+ in a thread: now once the plugins started, else right after.
      def background(name, &block)
        @started ? spawn(name, block) : @pending << [name, block]
        nil
      end

      # Puma.stats and Puma.stats_hash answer Margay's stats, when a Puma
      # module is here (the shim's, or the puma gem's: an app that has it in
      # its Gemfile often loads it). The gem's own Puma.stats reads the object
      # in @get_stats (Puma.stats_object=): it is pointed at Margay's too.
      def bridge_stats
        return unless defined?(::Puma)

        ::Puma.instance_variable_set(:@get_stats, Stats::Current)
        return if ::Puma.respond_to?(:stats_hash)

        ::Puma.define_singleton_method(:stats_hash) { Margay.stats_hash }
        ::Puma.define_singleton_method(:stats) { Margay.stats }
      end

      private

      # Puma::Plugin from the puma gem when it can be loaded, else the shim;
      # Puma::Const::VERSION (plugins branch on it); Puma.stats and stats_hash.
      def install_puma_api
        unless defined?(::Puma::Plugin)
          begin
            require "puma/plugin"
            require "puma/const"
          rescue LoadError
            $LOAD_PATH.unshift(SHIM_DIR) unless $LOAD_PATH.include?(SHIM_DIR)
            require "puma/plugin"
          end
        end
        ::Puma::Plugin.prepend(Background) unless ::Puma::Plugin.ancestors.include?(Background)
        bridge_stats
      end

      # [name, plugin instance], or nil (warned) when it cannot be loaded.
      def find(name)
        [name, ::Puma::Plugins.find(name).new]
      rescue StandardError, ScriptError => e
        @log.warn("plugin #{name} not loaded: #{e.message.lines.first.to_s.strip} (#{e.class})")
        nil
      end

      def start_one(name, plugin, launcher)
        if plugin.respond_to?(:config)
          @log.warn("plugin #{name}: its config(dsl) hook is not run (Margay's config file is not Puma's DSL): " \
                    "the settings it adds are ignored")
        end
        plugin.start(launcher) if plugin.respond_to?(:start)
        true
      rescue StandardError, ScriptError => e
        @log.warn("plugin #{name} not started: #{e.message.lines.first.to_s.strip} (#{e.class}); Margay serves without it")
        false
      end

      def spawn(name, block)
        thread = Thread.new do
          Thread.current.name = "margay plugin bg" # before the block: on JRuby it runs at once, in parallel
          block.call
        rescue StandardError, ScriptError => e
          @log.exception(e, "plugin #{name}: background thread failed")
        end
        thread.report_on_exception = false
        @threads << thread
        thread
      end
    end
  end
end
