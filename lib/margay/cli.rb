# frozen_string_literal: true

require "optparse"
require_relative "errors"
require_relative "configuration"
require_relative "configuration/sources"
require_relative "log"
require_relative "version"

module Margay
  # `margay [options] [rackup file]`: parses flags (Puma's names where they mean
  # the same), reads the config file, builds the Configuration and hands it to
  # Launcher. Usage and configuration mistakes end with one line on stderr and
  # exit status 64 (EX_USAGE), never a backtrace.
  class CLI
    # Exit status of a usage or configuration mistake (sysexits.h EX_USAGE).
    EX_USAGE = 64

    # @param argv [Array<String>] the arguments (not modified)
    # @param out [IO] banner and access log
    # @param err [IO] errors and warnings
    def initialize(argv, out: $stdout, err: $stderr)
      @argv = argv.dup
      @original_argv = argv.dup.freeze
      @out = out
      @err = err
      @parsed = nil
      @sources = nil
      @configuration = nil
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
      !@parsed[:rackup].nil? || sources.file_settings.key?(:rackup)
    end

    private

    def launch
      require_relative "launcher"
      config = configuration
      @out.sync = true if @out.respond_to?(:sync=)
      log = Log.new(out: @out, err: @err, quiet: config.quiet)
      restart = [File.expand_path($PROGRAM_NAME), *@original_argv]
      Launcher.new(config, log: log, rackup_given: rackup_given?, restart_argv: restart).run
    rescue AppLoadError => e
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
        o.banner = "Usage: margay [options] [rackup file (default: #{Configuration::DEFAULTS[:rackup]})]"
        o.version = VERSION
        o.require_exact = true
        o.separator ""
        o.on("-b", "--bind URL", "Listen on URL: tcp://HOST:PORT or unix://PATH (repeatable)") { |v| @parsed[:binds] << v }
        o.on("-p", "--port PORT", "Listen on tcp://#{Configuration::DEFAULT_HOST}:PORT (repeatable; with -b, adds)") do |v|
          @parsed[:binds] << port_bind(v)
        end
        o.on("-t", "--threads MIN:MAX", "Threads running the app; N means N:N (default #{default_threads})") { |v| single(:threads, v) }
        o.on("-w", "--workers N", "Worker processes (cluster mode); auto: one per CPU (default: WEB_CONCURRENCY or 0)") { |v| single(:workers, v) }
        o.on("-e", "--environment ENV", "Environment, sets RACK_ENV (default: RACK_ENV or development)") { |v| single(:environment, v) }
        o.on("-C", "--config FILE", "Config file (default: #{Configuration::Sources::DEFAULT_PATH} when present)") { |v| single(:config, v) }
        o.on("--pidfile PATH", "Write the process id to PATH while running") { |v| single(:pidfile, v) }
        o.on("-q", "--quiet", "No banner or info lines") { @parsed[:settings][:quiet] = true }
        o.on("--log-requests", "One access-log line per request on stdout") { @parsed[:settings][:log_requests] = true }
        o.on("-v", "--version", "Print the version and exit") { @parsed[:action] = :version }
        o.on("-h", "--help", "Print this help and exit") { @parsed[:action] = :help }
      end
    end

    # A flag that takes one value: giving it twice with different values is a
    # contradiction, not a silent "last one wins".
    def single(key, value)
      previous = @parsed[key]
      raise UsageError, "contradictory --#{key} values: #{previous} and #{value}" if previous && previous != value

      @parsed[key] = value
    end

    def default_threads
      "#{Configuration::DEFAULTS[:min_threads]}:#{Configuration::DEFAULTS[:max_threads]}"
    end

    def port_bind(value)
      port = Integer(value, 10) if value.match?(/\A\d+\z/)
      raise UsageError, "invalid port #{value.inspect}: expected 0..65535" unless port&.between?(0, 65_535)

      Configuration.tcp_bind(port)
    end

    # The config file (-C, or config/margay.rb when present) and WEB_CONCURRENCY.
    def sources
      parse
      @sources ||= Configuration::Sources.new(Configuration::Sources.config_path(@parsed[:config]))
    end

    # The file's mistakes are reported before the flags'.
    def build_configuration
      sources.configuration.with(**flag_settings)
    end

    def flag_settings
      settings = @parsed[:settings].dup
      settings[:binds] = @parsed[:binds] unless @parsed[:binds].empty?
      if @parsed[:threads]
        settings[:min_threads], settings[:max_threads] = Configuration::Sources.parse_threads(@parsed[:threads])
      end
      settings[:environment] = @parsed[:environment] if @parsed[:environment]
      settings[:pidfile] = @parsed[:pidfile] if @parsed[:pidfile]
      settings[:rackup] = @parsed[:rackup] if @parsed[:rackup]
      settings[:workers] = worker_flag if @parsed[:workers]
      settings
    end

    def worker_flag
      Configuration::DSL.worker_count(@parsed[:workers]) || raise(UsageError, "invalid --workers #{@parsed[:workers].inspect}: a number or auto")
    end
  end
end
