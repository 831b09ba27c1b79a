# frozen_string_literal: true

require_relative "../configuration"
require_relative "dsl"

module Margay
  class Configuration
    # Where a Configuration's settings come from, each over the one before:
    # DEFAULTS, the environment Puma reads (WEB_CONCURRENCY, PUMA_MIN_THREADS /
    # MIN_THREADS, PUMA_MAX_THREADS / MAX_THREADS, PUMA_PERSISTENT_TIMEOUT),
    # the config file, then the caller's overrides (CLI flags, rackup or Rails
    # options). The one code path for the CLI and the rackup handler.
    #
    #   sources = Configuration::Sources.new(Configuration::Sources.config_path(nil))
    #   config = sources.configuration.with(max_threads: 8)
    class Sources
      # Margay's own config file, read first when it exists and none was named.
      DEFAULT_PATH = "config/margay.rb"

      # The config files read when none is named: the first that exists.
      # Margay's, then Puma's (config/puma/ENV.rb, then config/puma.rb).
      # @param environment [String] -e, else APP_ENV / RACK_ENV / RAILS_ENV / development
      def self.default_paths(environment)
        [DEFAULT_PATH, "config/puma/#{environment}.rb", "config/puma.rb"]
      end

      # The config file to read: +named+ (it must exist; "-" means none, as
      # in Puma), nil with +no_config+ (--no-config), else the first of
      # #default_paths that exists.
      # @raise [ConfigError] +named+ is not a file
      def self.config_path(named, environment: nil, no_config: false, env: ENV)
        if named.nil?
          return nil if no_config

          default_paths(environment || default_environment(env)).find { |path| File.file?(path) }
        elsif named == "-" then nil
        elsif File.file?(named) then named
        else raise ConfigError, "config file #{named} not found"
        end
      end

      # The environment when no flag or option names it, as Puma 8 reads it.
      def self.default_environment(env = ENV)
        [env["APP_ENV"], env["RACK_ENV"], env["RAILS_ENV"]].find { |v| v && !v.empty? } || "development"
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
      # @param env [#[]] the process environment (WEB_CONCURRENCY, thread counts)
      # @param default_host [String, nil] the host of a bare `port N` in the file
      def initialize(path, env: ENV, default_host: nil)
        @path = path
        @env = env
        @default_host = default_host
        @file_settings = nil
        @lines = {}
        @configuration = nil
      end

      # The settings from the environment and the config file (the file's win).
      # @raise [ConfigError] naming the file and line
      def file_settings
        @file_settings ||= env_settings.merge(read_file)
      end

      # The Configuration from the defaults and #file_settings; the caller's
      # overrides go on top with #with. A value from the file that
      # Configuration rejects is reported at the file's line that set it.
      # @raise [ConfigError]
      def configuration
        @configuration ||= locate { Configuration.new(**file_settings) }
      end

      # Configuration#with(**overrides) on #configuration, errors located in
      # the file when the file set the value.
      def with(**overrides)
        base = configuration
        locate(overrides) { base.with(**overrides) }
      end

      private

      def read_file
        return {} unless @path

        settings, @lines = DSL.read(@path, default_host: @default_host, env: @env)
        settings
      end

      # Prefix a ConfigError with "file:line:" of the line that set the value
      # (unless +overrides+ set it: a flag's mistake is not the file's).
      def locate(overrides = {})
        yield
      rescue InvalidSetting => e
        raise if @path.nil? || overrides.key?(e.setting) || e.message.include?(@path)

        where = @lines[[e.setting, e.value]] || @lines[e.setting] || line_of_pair(e.setting) || @path
        raise ConfigError, "#{where}: #{e.message}"
      rescue ConfigError => e
        raise if @path.nil? || e.message.include?(@path)

        raise ConfigError, "#{@path}: #{e.message}"
      end

      # threads sets min_threads and max_threads together.
      def line_of_pair(setting)
        @lines[:max_threads] if setting == :min_threads
      end

      def env_settings
        settings = {}
        value = @env["WEB_CONCURRENCY"].to_s.strip
        unless value.empty?
          count = DSL.worker_count(value)
          raise ConfigError, "WEB_CONCURRENCY=#{value.inspect}: expected a number or auto" unless count

          settings[:workers] = count
        end
        { min_threads: %w[PUMA_MIN_THREADS MIN_THREADS], max_threads: %w[PUMA_MAX_THREADS MAX_THREADS],
          keepalive_timeout: %w[PUMA_PERSISTENT_TIMEOUT] }.each do |key, names|
          name = names.find { |n| !@env[n].to_s.empty? } or next
          settings[key] = Integer(@env[name], 10)
        rescue ArgumentError
          raise ConfigError, "#{name}=#{@env[name].inspect}: expected an integer"
        end
        settings
      end
    end
  end
end
