# frozen_string_literal: true

require_relative "../configuration"
require_relative "dsl"

module Margay
  class Configuration
    # Where a Configuration's settings come from, each over the one before:
    # DEFAULTS, WEB_CONCURRENCY (workers, as Puma and Heroku use it), the
    # config file, then the caller's overrides (CLI flags, rackup or Rails
    # options). The one code path for the CLI and the rackup handler.
    #
    #   sources = Configuration::Sources.new(Configuration::Sources.config_path(nil))
    #   config = sources.configuration.with(max_threads: 8)
    class Sources
      # The config file read when it exists and none was named.
      DEFAULT_PATH = "config/margay.rb"

      # The config file to read: +named+ (it must exist), else DEFAULT_PATH
      # when it exists, else nil.
      # @raise [ConfigError] +named+ is not a file
      def self.config_path(named)
        if named.nil? then File.file?(DEFAULT_PATH) ? DEFAULT_PATH : nil
        elsif File.file?(named) then named
        else raise ConfigError, "config file #{named} not found"
        end
      end

      # Parse "MIN:MAX" or "N" (N:N) into [min, max] (the CLI's -t, rackup's Threads).
      # @raise [ConfigError] for anything else
      def self.parse_threads(value)
        match = value.to_s.strip.match(/\A(\d+)(?::(\d+))?\z/)
        raise ConfigError, "threads must be MIN:MAX or N, got #{value.inspect}" unless match

        min = Integer(match[1], 10)
        [min, match[2] ? Integer(match[2], 10) : min]
      end

      # The config file's name, or nil when there is none.
      attr_reader :path

      # @param path [String, nil] the config file (nil: none)
      # @param env [#[]] the process environment (WEB_CONCURRENCY)
      def initialize(path, env: ENV)
        @path = path
        @env = env
        @file_settings = nil
        @configuration = nil
      end

      # The settings from the environment and the config file (the file's win).
      # @raise [ConfigError] naming the file and line
      def file_settings
        @file_settings ||= env_settings.merge(@path ? DSL.load(@path) : {})
      end

      # The Configuration from the defaults and #file_settings; the caller's
      # overrides go on top with Configuration#with. An invalid value from
      # the file is reported with the file's name.
      # @raise [ConfigError]
      def configuration
        @configuration ||= Configuration.new(**file_settings)
      rescue ConfigError => e
        raise if @path.nil? || e.message.include?(@path)

        raise ConfigError, "#{@path}: #{e.message}"
      end

      private

      def env_settings
        value = @env["WEB_CONCURRENCY"]
        return {} if value.nil? || value.empty?

        count = DSL.worker_count(value)
        raise ConfigError, "WEB_CONCURRENCY=#{value.inspect}: expected a number or auto" unless count

        { workers: count }
      end
    end
  end
end
