# frozen_string_literal: true

# Margay's stand-in for the puma gem's puma/plugin.rb, on the load path only
# when the bundle has no puma gem (Margay::Plugins): the same registry and
# Puma::Plugin.create, so plugin files written for Puma load unchanged.
require "margay/stats"

module Puma
  class UnknownPlugin < RuntimeError; end

  # The Puma API level plugins see (they branch on it: 7+ has after_booted).
  module Const
    VERSION = PUMA_VERSION = Margay::Stats::PUMA_API_VERSION
  end

  # Plugin classes by name; #find requires puma/plugin/NAME on first use.
  class PluginRegistry
    def initialize
      @plugins = {}
    end

    def register(name, cls)
      @plugins[name.to_s] = cls
    end

    def find(name)
      name = name.to_s
      return @plugins[name] if @plugins[name]

      begin
        require "puma/plugin/#{name}"
      rescue LoadError => e
        raise UnknownPlugin, "Unable to find plugin: #{name} (#{e.message})"
      end
      @plugins[name] or raise UnknownPlugin, "puma/plugin/#{name} did not register a plugin"
    end
  end

  Plugins = PluginRegistry.new

  # The base class of every plugin. Margay::Plugins runs in_background.
  class Plugin
    MARGAY_SHIM = true

    # Register the class defined by the block under the name of the file
    # that calls it (puma/plugin/NAME.rb).
    def self.create(&block)
      file = caller_locations(1, 1).first.absolute_path.to_s
      name = file[%r{puma/plugin/([^/]+)\.rb\z}, 1] or raise UnknownPlugin, "#{file} is not puma/plugin/NAME.rb"
      cls = Class.new(self)
      cls.class_eval(&block)
      Plugins.register(name, cls)
    end

    def in_background(&)
      raise NotImplementedError, "in_background is run by Margay::Plugins"
    end
  end
end
