# frozen_string_literal: true

require "rackup/handler"
require "margay"
require "margay/cli"
require "margay/launcher"
require "margay/configuration/sources"

module Rackup
  module Handler
    # `rackup -s margay` and `bin/rails server -u margay`. Reads config/margay.rb
    # when present and WEB_CONCURRENCY, as the CLI does (Configuration::Sources),
    # then applies rackup's options over them:
    #
    #   Host, Port       -> bind tcp://HOST:PORT
    #   environment      -> environment
    #   Threads          -> threads ("MIN:MAX" or "N", as with `rackup -O Threads=2:8`)
    #   Silent, quiet    -> quiet
    #   Verbose          -> log_requests
    #   any setting name -> that setting (`rackup -O header_timeout=10`)
    #
    # When the caller says which options the user typed (Rails passes
    # :user_supplied_options), only those override the config file.
    module Margay
      Configuration = ::Margay::Configuration
      private_constant :Configuration

      # Serve +app+ until TERM/INT; yields the bound server before serving.
      def self.run(app, **options, &block)
        config = configuration(options)
        log = ::Margay::Log.new(quiet: config.quiet)
        $stdout.sync = true
        launcher = ::Margay::Launcher.new(config, log: log, app: app, app_name: "given by #{caller_name(options)}")
        @launcher = launcher
        launcher.run(&block)
      rescue ::Margay::ConfigError => e
        warn "margay: #{e.message}"
        exit ::Margay::CLI::EX_USAGE
      ensure
        @launcher = nil
      end

      # Stop a server started with .run (graceful; safe from a trap).
      def self.shutdown
        @launcher&.server&.stop
      end

      # For `rackup -s margay -h`.
      def self.valid_options
        defaults = Configuration::DEFAULTS
        {
          "Host=HOST" => "Hostname to listen on (default: localhost in development, else #{Configuration::DEFAULT_HOST})",
          "Port=PORT" => "Port to listen on (default: #{Configuration::DEFAULT_PORT})",
          "Threads=MIN:MAX" => "Threads running the app (default: #{defaults[:min_threads]}:#{defaults[:max_threads]})",
          "Verbose" => "Log every request",
          "SETTING=VALUE" => "Any Margay setting by name, e.g. header_timeout=10 (Margay::Configuration::DEFAULTS)"
        }
      end

      # The Configuration for rackup/Rails +options+ (Symbol keys): the
      # defaults, WEB_CONCURRENCY from +env+, +config_file+ when it exists, then
      # the options.
      def self.configuration(options, config_file: Configuration::Sources::DEFAULT_PATH, env: ENV)
        sources = Configuration::Sources.new(File.file?(config_file) ? config_file : nil, env: env)
        file = sources.file_settings
        base = sources.configuration
        given = options[:user_supplied_options]
        settings = overrides(given ? options.select { |key, _| given.include?(key) } : options)
        # rackup/Rails always pass Host and Port (their defaults included); they
        # replace the file's binds unless the file has binds and the user typed neither.
        if (options.key?(:Host) || options.key?(:Port)) && (file[:binds].nil? || settings.key?(:binds) || given.nil?)
          settings[:binds] = [bind_url(options[:Host], options[:Port])]
        end
        # The environment is always rackup's: it has already set RACK_ENV from it.
        settings[:environment] = options[:environment].to_s if options[:environment]
        base.with(**settings)
      end

      # Settings from rackup's options (all of them, or those the user typed).
      def self.overrides(options)
        settings = {}
        settings[:binds] = [bind_url(options[:Host], options[:Port])] if options.key?(:Host) || options.key?(:Port)
        if options[:Threads]
          settings[:min_threads], settings[:max_threads] = Configuration::Sources.parse_threads(options[:Threads])
        end
        settings[:quiet] = true if options[:Silent] || options[:quiet]
        settings[:log_requests] = true if options[:Verbose]
        options.each do |key, value|
          next if %i[binds environment quiet].include?(key) || !Configuration::SETTINGS.include?(key)

          settings[key] = coerce(value)
        end
        settings
      end

      # tcp://HOST:PORT from rackup's Host and Port, defaulting to the default bind's.
      def self.bind_url(host, port)
        Configuration.tcp_bind(port || Configuration::DEFAULT_PORT, host || Configuration::DEFAULT_HOST)
      rescue ArgumentError
        raise ::Margay::ConfigError, "Port must be an integer, got #{port.inspect}"
      end

      # A `-O name=value` string as the setting's type.
      def self.coerce(value)
        case value
        when /\A\d+\z/ then Integer(value, 10)
        when /\A\d+\.\d+\z/ then Float(value)
        when "true" then true
        when "false" then false
        when /\A(auto|epoll|poll)\z/ then value.to_sym
        else value
        end
      end

      # Rails passes :user_supplied_options; plain rackup does not.
      def self.caller_name(options)
        options.key?(:user_supplied_options) ? "Rails" : "rackup"
      end

      private_class_method :overrides, :bind_url, :coerce, :caller_name
    end

    register :margay, Margay
  end
end
