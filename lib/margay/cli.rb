# frozen_string_literal: true

require "optparse"
require_relative "configuration"
require_relative "dsl"
require_relative "log"
require_relative "version"

module Margay
  # `margay [options] [rackup file]`: parses flags (Puma's names where they mean
  # the same), reads the config file, builds the Configuration and hands it to
  # Launcher. Usage and configuration mistakes end with one line on stderr and
  # exit status 64 (EX_USAGE), never a backtrace.
  class CLI
    EX_USAGE = 64
    # A mistake on the command line (as opposed to one in the config file).
    class UsageError < StandardError; end

    # Flags that take one value: giving one twice with different values is a
    # contradiction, not a silent "last one wins".
    SINGLE_VALUED = %i[environment config pidfile threads].freeze
    private_constant :SINGLE_VALUED

    # Parse "MIN:MAX" or "N" (N:N) into [min, max].
    # @raise [ConfigError] for anything else
    def self.parse_threads(value)
      match = value.to_s.strip.match(/\A(\d+)(?::(\d+))?\z/)
      raise ConfigError, "threads must be MIN:MAX or N, got #{value.inspect}" unless match

      min = Integer(match[1], 10)
      [min, match[2] ? Integer(match[2], 10) : min]
    end

    # @param argv [Array<String>] the arguments (not modified)
    # @param out [IO] banner and access log
    # @param err [IO] errors and warnings
    def initialize(argv, out: $stdout, err: $stderr)
      @argv = argv.dup
      @original_argv = argv.dup.freeze
      @out = out
      @err = err
      @parsed = nil
    end

    # Run the server (or print help/version). Returns the process exit status.
    def run
      case parse
      when :help then @out.puts(parser.help)
      when :version then @out.puts("Margay #{VERSION}")
      else return launch
      end
      0
    rescue UsageError => e
      @err.puts("margay: #{e.message}\nRun 'margay --help' for the options.")
      EX_USAGE
    rescue ConfigError => e
      @err.puts("margay: #{e.message}")
      EX_USAGE
    end

    # The Configuration from defaults, the config file and the flags (flags win).
    # @raise [UsageError, ConfigError]
    def configuration
      @configuration ||= build_configuration
    end

    # True when the rackup file was named (argument or config file): a missing
    # file is then an error rather than a reason to serve the demo app.
    def rackup_given?
      parse
      !@parsed[:rackup].nil? || file_settings.key?(:rackup)
    end

    private

    def launch
      require_relative "launcher"
      config = configuration
      @out.sync = true if @out.respond_to?(:sync=)
      log = Log.new(out: @out, err: @err, quiet: config.quiet)
      restart = [File.expand_path($PROGRAM_NAME), *@original_argv]
      Launcher.new(config, log: log, rackup_given: rackup_given?, restart_argv: restart).run
    rescue Launcher::AppLoadError => e
      log.exception(e.cause || e, "cannot load #{config.rackup}")
      1
    end

    # Returns :help, :version or :run; fills @parsed.
    def parse
      return @parsed[:action] if @parsed

      @parsed = { action: :run, binds: [], settings: {} }
      rest = parser.parse(@argv)
      raise UsageError, "one rackup file expected, got #{rest.size}: #{rest.join(' ')}" if rest.size > 1

      @parsed[:rackup] = rest.first
      @parsed[:action]
    rescue OptionParser::ParseError => e
      raise UsageError, e.message
    end

    def parser
      @parser ||= OptionParser.new do |o|
        o.banner = "Usage: margay [options] [rackup file (default: config.ru)]"
        o.version = VERSION
        o.require_exact = true
        o.separator ""
        o.on("-b", "--bind URL", "Listen on URL: tcp://HOST:PORT or unix://PATH (repeatable)") { |v| @parsed[:binds] << v }
        o.on("-p", "--port PORT", "Listen on tcp://0.0.0.0:PORT (repeatable; with -b, adds)") { |v| @parsed[:binds] << port_bind(v) }
        o.on("-t", "--threads MIN:MAX", "Threads running the app; N means N:N (default 0:5)") { |v| single(:threads, v) }
        o.on("-w", "--workers N", "Worker processes (cluster mode); auto: one per CPU (default: WEB_CONCURRENCY or 0)") { |v| single(:workers, v) }
        o.on("-e", "--environment ENV", "Environment, sets RACK_ENV (default: RACK_ENV or development)") { |v| single(:environment, v) }
        o.on("-C", "--config FILE", "Config file (default: #{DSL::DEFAULT_PATH} when present)") { |v| single(:config, v) }
        o.on("--pidfile PATH", "Write the process id to PATH while running") { |v| single(:pidfile, v) }
        o.on("-q", "--quiet", "No banner or info lines") { @parsed[:settings][:quiet] = true }
        o.on("--log-requests", "One access-log line per request on stdout") { @parsed[:settings][:log_requests] = true }
        o.on("-v", "--version", "Print the version and exit") { @parsed[:action] = :version }
        o.on("-h", "--help", "Print this help and exit") { @parsed[:action] = :help }
      end
    end

    def single(key, value)
      previous = @parsed[key]
      raise UsageError, "contradictory --#{key} values: #{previous} and #{value}" if previous && previous != value

      @parsed[key] = value
    end

    def port_bind(value)
      port = Integer(value, 10) if value.match?(/\A\d+\z/)
      raise UsageError, "invalid port #{value.inspect}: expected 0..65535" unless port&.between?(0, 65_535)

      "tcp://0.0.0.0:#{port}"
    end

    def config_path
      parse
      return @parsed[:config] if @parsed[:config]

      DSL::DEFAULT_PATH if File.file?(DSL::DEFAULT_PATH)
    end

    def file_settings
      @file_settings ||= begin
        path = config_path
        settings = if path.nil? then {}
                   elsif !File.file?(path) then raise ConfigError, "config file #{path} not found"
                   else DSL.load(path)
                   end
        env_workers.merge(settings)
      end
    end

    # WEB_CONCURRENCY (as Puma and Heroku use it) sets workers unless the file or a flag does.
    def env_workers
      value = ENV["WEB_CONCURRENCY"]
      return {} if value.nil? || value.empty?

      count = DSL.worker_count(value)
      raise ConfigError, "WEB_CONCURRENCY=#{value.inspect}: expected a number or auto" unless count

      { workers: count }
    end

    # Build from the file first so that an invalid value there is reported with
    # the file's name, then apply the flags.
    def build_configuration
      parse
      base = begin
        Configuration.new(**file_settings)
      rescue ConfigError => e
        raise if config_path.nil? || e.message.include?(config_path)

        raise ConfigError, "#{config_path}: #{e.message}"
      end
      base.with(**flag_settings)
    end

    def flag_settings
      settings = @parsed[:settings].dup
      settings[:binds] = @parsed[:binds] unless @parsed[:binds].empty?
      settings[:min_threads], settings[:max_threads] = CLI.parse_threads(@parsed[:threads]) if @parsed[:threads]
      settings[:environment] = @parsed[:environment] if @parsed[:environment]
      settings[:pidfile] = @parsed[:pidfile] if @parsed[:pidfile]
      settings[:rackup] = @parsed[:rackup] if @parsed[:rackup]
      settings[:workers] = worker_flag if @parsed[:workers]
      settings
    end

    def worker_flag
      DSL.worker_count(@parsed[:workers]) || raise(UsageError, "invalid --workers #{@parsed[:workers].inspect}: a number or auto")
    end
  end
end
