# frozen_string_literal: true

require "rackup/handler"
require "margay"
require "margay/cli"
require "margay/launcher"
require "margay/configuration/sources"

module Rackup
  module Handler
    # `rackup -s margay` and `bin/rails server -u margay`. Reads the config
    # file the CLI would (config/margay.rb, else config/puma/ENV.rb, else
    # config/puma.rb) and the environment's settings (Configuration::Sources),
    # then applies rackup's options over them, as Puma's handler does:
    #
    #   Host, Port       -> bind tcp://HOST:PORT ("localhost": 127.0.0.1 and ::1;
    #                       a Host starting with . / or @: unix://HOST)
    #   environment      -> environment (and which config/puma/ENV.rb)
    #   Threads          -> threads ("MIN:MAX" or "N", as with `rackup -O Threads=2:8`)
    #   Silent           -> silent (nothing on stdout)
    #   quiet            -> quiet (no access log)
    #   Verbose          -> log_requests
    #   any setting name -> that setting (`rackup -O header_timeout=10`)
    #
    # When the caller says which options the user typed (Rails passes
    # :user_supplied_options), only those override the config file; the
    # others are defaults under it, and a defaulted Host is the host of the
    # file's bare `port N` (so `port ENV.fetch("PORT", 3000)` in a Rails
    # config/puma.rb listens on localhost in development, as under Puma).
    module Margay
      Configuration = ::Margay::Configuration
      private_constant :Configuration

      # Serve +app+ until TERM/INT; yields the bound server before serving.
      def self.run(app, **options, &block)
        config = configuration(options)
        out = config.silent ? File.open(File::NULL, "w") : $stdout
        log = ::Margay::Log.new(out: out, quiet: config.silent)
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
          "Host=HOST" => "Hostname to listen on (localhost: 127.0.0.1 and ::1; default: rackup's, else #{Configuration::DEFAULT_HOST})",
          "Port=PORT" => "Port to listen on (default: #{Configuration::DEFAULT_PORT})",
          "Threads=MIN:MAX" => "Threads running the app (default: #{defaults[:min_threads]}:#{defaults[:max_threads]})",
          "Verbose" => "Log every request",
          "SETTING=VALUE" => "Any Margay setting by name, e.g. header_timeout=10 (Margay::Configuration::DEFAULTS)"
        }
      end

      # The Configuration for rackup/Rails +options+ (Symbol keys): the
      # defaults, the environment's settings from +env+, the config file
      # (+config_file+ when given and present, else the CLI's default files),
      # then the options.
      def self.configuration(options, config_file: nil, env: ENV)
        given = options[:user_supplied_options]
        environment = (options[:environment] || Configuration::Sources.default_environment(env)).to_s
        path = if config_file then File.file?(config_file) ? config_file : nil
               else Configuration::Sources.config_path(nil, environment: environment, env: env)
               end
        default_host = options[:Host]&.to_s if given && !given.include?(:Host)
        sources = Configuration::Sources.new(path, env: env, default_host: default_host)
        file = sources.file_settings
        settings = overrides(given ? options.select { |key, _| given.include?(key) } : options)
        # rackup/Rails always pass Host and Port (their defaults included); they
        # replace the file's binds unless the file has binds and the user typed neither.
        if (options.key?(:Host) || options.key?(:Port)) && (file[:binds].nil? || settings.key?(:binds) || given.nil?)
          settings[:binds] = [bind_url(options[:Host], options[:Port])]
        end
        # The environment is always rackup's: it has already set RACK_ENV from it.
        settings[:environment] = options[:environment].to_s if options[:environment]
        sources.with(**settings)
      end

      # Settings from rackup's options (all of them, or those the user typed).
      def self.overrides(options)
        settings = {}
        settings[:binds] = [bind_url(options[:Host], options[:Port])] if options.key?(:Host) || options.key?(:Port)
        if options[:Threads]
          settings[:min_threads], settings[:max_threads] = Configuration::Sources.parse_threads(options[:Threads])
        end
        settings[:silent] = true if options[:Silent]
        if options[:Verbose]
          settings.update(log_requests: true, quiet: false)
        elsif options[:quiet]
          settings.update(quiet: true, log_requests: false)
        end
        options.each do |key, value|
          next if %i[binds environment quiet silent log_requests app].include?(key) || !Configuration::SETTINGS.include?(key)

          settings[key] = coerce(value)
        end
        settings
      end

      # The bind for rackup's Host and Port, as Puma's handler builds it: a
      # path-like Host is a unix socket, else tcp://HOST:PORT with the
      # defaults' host and port.
      def self.bind_url(host, port)
        host = host&.to_s
        return "unix://#{host}" if host&.start_with?(".", "/", "@")

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
