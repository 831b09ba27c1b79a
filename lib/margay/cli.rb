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
    # Exit status when the native extension is not built (sysexits.h EX_UNAVAILABLE).
    EX_UNAVAILABLE = 69

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
      when :version then @out.puts("margay version #{VERSION}")
      else return launch
      end
      0
    rescue UsageError => e
      @err.puts("margay: #{e.message} (see margay --help)")
      EX_USAGE
    rescue ConfigError => e
      @err.puts("margay: #{e.message}")
      EX_USAGE
    rescue LoadError => e
      raise unless defined?(NativeMissing) && e.is_a?(NativeMissing)

      @err.puts(e.message)
      EX_UNAVAILABLE
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
      require_relative "native" # first: an unbuilt extension is one line, not a backtrace
      require_relative "launcher"
      config = configuration
      @out.sync = true if @out.respond_to?(:sync=)
      # -s: nothing on stdout (banner, info and access lines), errors still on stderr.
      out = config.silent ? File.open(File::NULL, "w") : @out
      log = Log.new(out: out, err: @err, quiet: config.silent)
      restart = [File.expand_path($PROGRAM_NAME), *@original_argv]
      Launcher.new(config, log: log, rackup_given: rackup_given?, restart_argv: restart).run
    rescue AppLoadError => e
      log.exception(e.cause || e, "cannot load #{config.rackup}")
      1
    end

    # Returns :help, :version or :run; fills @parsed.
    def parse
      return @parsed[:action] if @parsed

      @parsed = { action: :run, binds: [], settings: {}, plugins: [], includes: [] }
      rest = parser.parse(split_long_values(@argv))
      raise UsageError, "one rackup file expected, got #{rest.size}: #{rest.join(' ')}" if rest.size > 1
      raise UsageError, "--no-config and --config contradict each other" if @parsed[:no_config] && @parsed[:config]

      @parsed[:rackup] = rest.first
      @parsed[:action]
    rescue OptionParser::ParseError => e
      raise UsageError, e.message
    end

    # "--name=value" as "--name value": the optparse shipped with Ruby 3.1
    # refuses the "=" form when require_exact is on, and Procfiles use it.
    def split_long_values(argv)
      options_end = argv.index("--") || argv.size
      argv.each_with_index.flat_map do |arg, i|
        i < options_end && arg.match?(/\A--[a-z][a-z-]*=/) ? arg.split("=", 2) : [arg]
      end
    end

    # Puma 8's flags, with Puma's meanings (docs/CONFIGURATION.md maps each).
    def parser
      @parser ||= OptionParser.new do |o|
        o.banner = "Usage: margay [options] [rackup file (default: #{Configuration::DEFAULTS[:rackup]})]"
        o.version = VERSION
        o.require_exact = true
        o.separator ""
        listen_flags(o)
        app_flags(o)
        process_flags(o)
        output_flags(o)
        puma_only_flags(o)
        o.on("-V", "--version", "Print the version and exit") { @parsed[:action] = :version }
        o.on("-h", "--help", "Print this help and exit") { @parsed[:action] = :help }
      end
    end

    def listen_flags(o)
      o.on("-b", "--bind URL", "Listen on URL: tcp://HOST:PORT or unix://PATH, with Puma's ?options (repeatable)") do |v|
        @parsed[:binds] << v
      end
      o.on("-p", "--port PORT", "Listen on #{Configuration.tcp_bind(0).sub(/:0\z/, ':PORT')} (repeatable; with -b, adds)") do |v|
        @parsed[:binds] << port_bind(v)
      end
      o.on("--bind-to-activated-sockets [only]", "Serve systemd's sockets (Margay always does when LISTEN_FDS is set)") do |v|
        raise UsageError, "--bind-to-activated-sockets takes nothing or 'only', got #{v.inspect}" unless v.nil? || v == "only"
      end
      o.on("--control-url URL", "The control app's listener (auto: a unix socket in the tmpdir)") do |v|
        setting(:control_url, v == "auto" ? Configuration::PumaCompat.auto_control_url : v)
      end
      o.on("--control-token TOKEN", "The control app's auth token (none: no token)") { |v| setting(:control_token, v) }
      health_flags(o)
    end

    # Behind a load balancer (docs/OPERATIONS.md).
    def health_flags(o)
      o.on("--health-bind URL", "The engine's health listener: GET /livez, /readyz, /metrics") { |v| setting(:health_bind, v) }
      o.on("--agent-bind URL", "HAProxy agent-check listener: one line (up ready W% maxconn:N, drain, down)") do |v|
        setting(:agent_bind, v)
      end
      o.on("--health-check-path PATH", "Answer GET/HEAD PATH on the main listeners in the engine (e.g. /up)") do |v|
        setting(:health_check_path, v)
      end
      o.on("--drain-delay SECONDS", "On TERM: unready and serving with connection: close for SECONDS, then stop") do |v|
        raise UsageError, "invalid --drain-delay #{v.inspect}: a number of seconds >= 0" unless v.match?(/\A\d+(\.\d+)?\z/)

        setting(:drain_delay, v.include?(".") ? Float(v) : Integer(v, 10))
      end
    end

    def app_flags(o)
      o.on("-t", "--threads MIN:MAX", "Threads running the app; N means N:N (default #{default_threads})") { |v| single(:threads, v) }
      # Fiber mode (docs/CONFIGURATION.md "Fiber mode").
      o.on("--fibers", "Fiber mode: each request in a Fiber; waits (I/O, sleep, locks) yield the thread") do
        setting(:fiber_scheduler, true)
      end
      o.on("--max-in-flight N", Integer, "Fiber mode: requests in flight per process, at most (default " \
                                         "#{Configuration::DEFAULTS[:max_in_flight]})") { |v| setting(:max_in_flight, v) }
      o.on("-w", "--workers N", "Worker processes (cluster mode); auto: one per CPU (default: WEB_CONCURRENCY or 0)") { |v| single(:workers, v) }
      o.on("-e", "--environment ENV", "Environment, sets RACK_ENV (default: APP_ENV, RACK_ENV, RAILS_ENV or development)") do |v|
        single(:environment, v)
      end
      o.on("-C", "--config FILE", "Config file (default: the first of #{Configuration::Sources.default_paths('ENV').join(', ')})") do |v|
        single(:config, v)
      end
      o.on("--no-config", "Read no config file") { @parsed[:no_config] = true }
      o.on("-I", "--include PATH", "Add PATH (colon-separated) to $LOAD_PATH") { |v| @parsed[:includes].concat(v.split(":")) }
      o.on("--preload", "Load the app in the master before forking workers") { setting(:preload_app, true) }
      o.on("-f", "--fork-worker [REQUESTS]", OptionParser::DecimalInteger,
           "Re-fork workers from a warm one after REQUESTS (default 1000; 0: on SIGURG only)") do |v|
        count = v || 1000
        raise UsageError, "invalid --fork-worker #{v}: a number of requests >= 0" if count.negative?

        setting(:refork_after, count.zero? ? nil : count)
      end
      o.on("--plugin NAME", "Load the Puma plugin NAME (repeatable)") { |v| @parsed[:plugins] << v }
      o.on("--jemalloc", "Run on jemalloc where installed (re-executes with it preloaded)") { setting(:jemalloc, true) }
      o.on("--prune-bundler", "A master that never loads the app runs without Bundler (re-executes without it)") do
        setting(:prune_bundler, true)
      end
      o.on("--lean-heap", "Ruby's GC keeps less free room in its heap (re-executes with RUBY_GC_HEAP_FREE_SLOTS_*)") do
        setting(:lean_heap, true)
      end
      o.on("--heap-room-before-fork SHARE", Float, "Before forking, grow the object heap until SHARE of it is free (0.4)") do |v|
        setting(:heap_room_before_fork, v)
      end
      o.on("--early-hints", "Early hints (rack.early_hints is always available)") { nil }
    end

    def process_flags(o)
      o.on("--pidfile PATH", "Write the process id to PATH while running") { |v| single(:pidfile, v) }
      o.on("-S", "--state PATH", "Write the state file pumactl -S reads to PATH") { |v| setting(:state_path, v) }
      o.on("--dir DIR", "chdir to DIR before loading the app") { |v| setting(:directory, v) }
      o.on("-R", "--restart-cmd CMD", "The command a hot restart runs (default: this one)") { |v| setting(:restart_command, v) }
      o.on("--idle-timeout SECONDS", "Stop after SECONDS without a request") do |v|
        seconds = Integer(v, 10) if v.match?(/\A\d+\z/)
        raise UsageError, "invalid --idle-timeout #{v.inspect}: a positive number of seconds" unless seconds&.positive?

        setting(:idle_timeout, seconds)
      end
      o.on("--tag NAME", "Extra text in the process title") { |v| setting(:tag, v) }
      o.on("--queue-timeout SECONDS", "503 (retry-after: 1) for a request that waited longer for a thread") do |v|
        seconds = Float(v) if v.match?(/\A\d+(\.\d+)?\z/)
        raise UsageError, "invalid --queue-timeout #{v.inspect}: a positive number of seconds" unless seconds&.positive?

        setting(:queue_timeout, seconds)
      end
      o.on("--queue-time-header", "Add X-Request-Start: t=<arrival> to requests without one") do
        setting(:queue_time_header, true)
      end
    end

    def output_flags(o)
      o.on("-q", "--quiet", "No access log (the default)") do
        setting(:quiet, true)
        setting(:log_requests, false)
      end
      o.on("-v", "--log-requests", "One access-log line per request on stdout") do
        setting(:log_requests, true)
        setting(:quiet, false)
      end
      o.on("-s", "--silent", "Nothing on stdout: no banner, info or access lines (errors still print)") { setting(:silent, true) }
      o.on("--redirect-stdout FILE", "Reopen stdout to FILE") { |v| setting(:redirect_stdout, v) }
      o.on("--redirect-stderr FILE", "Reopen stderr to FILE") { |v| setting(:redirect_stderr, v) }
      # Two flags rather than --[no-]redirect-append: Ruby 3.1's optparse with
      # require_exact refuses the positive form of a [no-] switch.
      o.on("--redirect-append", "Append to the redirect files (default: truncate)") { setting(:redirect_append, true) }
      o.on("--no-redirect-append", "Truncate the redirect files") { setting(:redirect_append, false) }
    end

    # Puma flags with nothing to do in Margay: accepted with one warning line.
    def puma_only_flags(o)
      o.on("--debug", "Puma's low-level debug log (not in Margay: warns)") do
        warn_flag("--debug", "use --log-requests and the server log")
      end
      o.on("--extra-runtime-dependencies GEMS", "Puma's gems kept after pruning (Margay keeps its own: warns)") do
        warn_flag("--extra-runtime-dependencies", "a pruned master loads only Margay and its own gems")
      end
    end

    def warn_flag(flag, why)
      @err.puts("margay: #{flag} is a Puma flag Margay has no use for (#{why}); ignored")
    end

    # A flag that sets one setting (the last one given wins, as in Puma).
    def setting(key, value)
      @parsed[:settings][key] = value
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

    # The config file (-C, or the first default file that exists, none with
    # --no-config) and the environment's settings.
    def sources
      parse
      @sources ||= Configuration::Sources.new(
        Configuration::Sources.config_path(@parsed[:config], environment: @parsed[:environment], no_config: @parsed[:no_config])
      )
    end

    # -I goes on $LOAD_PATH before the config file runs (it may require from
    # there). The file's mistakes are reported before the flags'.
    def build_configuration
      parse
      @parsed[:includes].reverse_each { |dir| $LOAD_PATH.unshift(dir) unless $LOAD_PATH.include?(dir) }
      sources.configuration
      sources.with(**flag_settings)
    end

    def flag_settings
      settings = @parsed[:settings].dup
      settings[:plugins] = (sources.file_settings[:plugins] || []) | @parsed[:plugins] unless @parsed[:plugins].empty?
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
