# frozen_string_literal: true

require "etc"

require_relative "../configuration"
require_relative "puma_compat"

module Margay
  class Configuration
    # The Ruby config file (config/margay.rb, or the file given with -C).
    # Evaluating it only collects a Hash of settings for Configuration.new; it
    # never touches a server.
    #
    #   bind "tcp://0.0.0.0:3000"
    #   threads 2, 8
    #   header_timeout 10
    #
    # Every key of Configuration::DEFAULTS is available by its name (except
    # +binds+: use +bind+ or +port+). To add a directive, define a public method
    # on DSL::Evaluator that records into +@settings+.
    module DSL
      # Evaluate the file at +path+. Returns a Hash of Configuration settings.
      # Raises ConfigError (naming the file and line) for an unknown directive,
      # a wrong argument, or a file that cannot be read or parsed.
      def self.load(path, **options)
        read(path, **options).first
      end

      # Evaluate the file at +path+. Returns [settings, lines]: lines maps a
      # setting (or [:binds, url]) to the "file:line" that set it last, so that
      # a value Configuration rejects later is reported at its line.
      # @param default_host [String, nil] the host a bare `port N` listens on
      #   (the rackup handler passes Rails' or rackup's Host, as Puma does)
      # @param env [#[]] WEB_CONCURRENCY decides between `single {}` and `cluster {}`
      def self.read(path, default_host: nil, env: ENV)
        source = File.read(path)
      rescue SystemCallError => e
        raise ConfigError, "cannot read config file #{path}: #{e.message.sub(/ @ \w+/, '')}"
      else
        evaluator = Evaluator.new(path, default_host: default_host, env: env)
        run(evaluator, path) { evaluator.evaluate(source, path) }
        [evaluator.settings, evaluator.lines]
      end

      # Evaluate +source+ as if it were the file +path+. Returns a Hash of settings.
      def self.evaluate(source, path = "(config)", default_host: nil, env: ENV)
        evaluator = Evaluator.new(path, default_host: default_host, env: env)
        run(evaluator, path) { evaluator.evaluate(source, path) }
        evaluator.settings
      end

      # Runs the block; anything it raises becomes a one-line ConfigError at
      # the config file's line.
      def self.run(evaluator, path)
        yield
      rescue ConfigError
        raise
      rescue SyntaxError => e
        # The message already starts with "path:line:"; keep its first line only.
        raise ConfigError, e.message.lines.first.chomp
      rescue ScriptError, StandardError => e
        raise ConfigError, "#{location(e, evaluator.paths | [path])}#{e.message.lines.first&.chomp} (#{e.class})"
      end
      private_class_method :run

      # "file:line: " of the innermost frame inside a config file.
      def self.location(error, paths)
        frame = (error.backtrace_locations || []).find { |l| paths.include?(l.path) }
        frame ? "#{frame.path}:#{frame.lineno}: " : "#{paths.first}: "
      end
      private_class_method :location

      # An Integer worker count from a number, "3", :auto or "auto" (one per CPU); nil if invalid.
      def self.worker_count(value)
        return Etc.nprocessors if value.to_s == "auto"
        return nil if value.nil?

        Integer(value.to_s, 10)
      rescue ArgumentError
        nil
      end

      # Internal: the receiver of the config file. Public methods are directives.
      class Evaluator
        include PumaCompat

        # Settings that take exactly one value and are named as in Configuration
        # (a setting added there becomes a directive here). The others have
        # methods of their own below, hooks included.
        PLAIN = (Configuration::SETTINGS - %i[binds workers environment pidfile rackup quiet log_requests silent
                                             event_backend tmpdir hooks preload_app app] -
                 PumaCompat::SETTINGS).freeze

        # Hook directives, Puma 8's names and every older alias => the hook
        # (Configuration::HOOKS). docs/CONFIGURATION.md "Hooks" has the table.
        HOOK_ALIASES = {
          before_fork: :before_fork,
          before_worker_fork: :before_worker_fork, on_worker_fork: :before_worker_fork,
          after_worker_fork: :after_worker_fork, after_worker_boot: :after_worker_fork,
          before_worker_boot: :before_worker_boot, on_worker_boot: :before_worker_boot,
          before_worker_shutdown: :before_worker_shutdown, on_worker_shutdown: :before_worker_shutdown,
          after_worker_shutdown: :after_worker_shutdown,
          before_restart: :before_restart, on_restart: :before_restart,
          before_refork: :before_refork, on_refork: :before_refork, after_refork: :after_refork,
          before_thread_start: :before_thread_start, on_thread_start: :before_thread_start,
          before_thread_exit: :before_thread_exit, on_thread_exit: :before_thread_exit,
          after_booted: :after_booted, on_booted: :after_booted,
          after_stopped: :after_stopped, on_stopped: :after_stopped,
          out_of_band: :out_of_band
        }.freeze

        # The config files evaluated so far (the first, then those it `load`s).
        attr_reader :paths

        # setting (or [:binds, url]) => "file:line" that set it.
        attr_reader :lines

        # @param path [String] the file's name, for error messages
        # @param default_host [String, nil] the host of a bare `port N`
        # @param env [#[]] WEB_CONCURRENCY, for `single {}` / `cluster {}`
        def initialize(path, default_host: nil, env: ENV)
          @path = path
          @paths = [path]
          @settings = {}
          @lines = {}
          @default_host = default_host
          @env = env
          @mode_blocks = []
          @warned = {}
          @loading = [path]
        end

        # Internal: evaluate +source+ as the file +path+, then the blocks of
        # `single`/`cluster` for the mode the file chose.
        def evaluate(source, path)
          instance_eval(source, path, 1)
          cluster = (@settings[:workers] || DSL.worker_count(@env["WEB_CONCURRENCY"]) || 0).positive?
          blocks = @mode_blocks
          @mode_blocks = []
          blocks.each { |mode, block| instance_eval(&block) if (mode == :cluster) == cluster }
        end

        # The collected settings (a copy).
        def settings
          @settings.dup
        end

        # Listen on +url+ (tcp://HOST:PORT or unix://PATH, with Puma's ?options). Repeatable.
        def bind(url)
          url = url.to_s
          (@settings[:binds] ||= []) << url
          @lines[[:binds, url]] = here
        end

        # Forget the binds so far (the defaults, or earlier `bind`/`port` lines).
        def clear_binds!
          @settings[:binds] = []
          @lines[:binds] = here
        end

        # Listen on tcp://HOST:PORT (HOST: Puma's default, "::" dual stack, or
        # "0.0.0.0" without IPv6). Repeatable, adds to bind.
        def port(number, host = nil)
          bind(Configuration.tcp_bind(number, host || default_host))
        rescue ArgumentError
          raise_here "port must be an integer, got #{number.inspect}"
        end

        # The host a bare `port N` listens on from here on (Puma's set_default_host).
        def set_default_host(host) # rubocop:disable Naming/AccessorMethodName
          @default_host = host.to_s
        end

        # The host a bare `port N` listens on.
        def default_host
          @default_host || DEFAULT_HOST
        end

        # The thread pool size: +threads 2, 8+, or +threads 5+ for 5:5.
        def threads(min, max = min)
          set(:min_threads, integer(:threads, min))
          set(:max_threads, integer(:threads, max))
        end

        # The environment reported to the app (sets RACK_ENV).
        def environment(name)
          set(:environment, name.to_s)
        end

        # Write the process id to +path+ while running.
        def pidfile(path)
          set(:pidfile, path.to_s)
        end

        # The rackup file to serve (default config.ru).
        def rackup(path)
          set(:rackup, path.to_s)
        end

        # No access log (Puma's quiet: the inverse of log_requests).
        def quiet(flag = true)
          set(:quiet, flag ? true : false)
          set(:log_requests, false) if flag
        end

        # One access-log line per request on stdout.
        def log_requests(flag = true)
          set(:log_requests, flag ? true : false)
          set(:quiet, false) if flag
        end

        # Nothing on stdout: no banner, info or access lines (errors still print).
        def silent(flag = true)
          set(:silent, flag ? true : false)
        end

        # :auto, :epoll or :poll.
        def event_backend(name)
          set(:event_backend, name.to_sym)
        end

        # Where request bodies above body_buffer_size are buffered.
        def tmpdir(path)
          set(:tmpdir, path&.to_s)
        end

        # Worker processes (cluster mode): a number, or :auto for one per CPU.
        def workers(count)
          return set(:workers, 0) if count.nil?

          set(:workers, DSL.worker_count(count) || raise_here("workers must be a number or :auto, got #{count.inspect}"))
        end

        # Load the app in the master before forking (Puma's preload_app!).
        def preload_app!(flag = true)
          set(:preload_app, flag ? true : false)
        end

        # The same as preload_app!.
        def preload_app(flag = true)
          preload_app!(flag)
        end

        # Evaluate another config file here (Puma's `load`; a relative path is
        # taken from the current directory, as Puma does).
        def load(path)
          path = path.to_s
          raise_here "load: config file #{path} not found" unless File.file?(path)
          raise_here "load: #{path} is already being loaded (a loop)" if @loading.include?(path)

          @paths << path unless @paths.include?(path)
          @loading << path
          instance_eval(File.read(path), path, 1)
        ensure
          @loading.delete(path) if @loading.last == path
        end

        # Puma's inject: evaluate the block as config.
        def inject(&block)
          instance_eval(&block)
        end

        # Puma's get: a setting collected so far (Margay's name), or +default+.
        def get(key, default = nil)
          value = @settings[key.to_sym]
          value.nil? ? default : value
        end

        # Puma 6+: the block runs only in single mode (no workers).
        def single(&block)
          raise_here "single needs a block" unless block
          @mode_blocks << [:single, block]
        end

        # Puma 6+: the block runs only in cluster mode (workers > 0).
        def cluster(&block)
          raise_here "cluster needs a block" unless block
          @mode_blocks << [:cluster, block]
        end

        # Puma's optional +key+ (a String or Symbol): the block then also
        # receives a Hash kept per key in the worker (Configuration::Hook).
        HOOK_ALIASES.each do |directive, hook|
          define_method(directive) do |key = nil, &block|
            raise_here "#{directive} needs a block" unless block
            raise_here "#{directive}: the key must be a String or Symbol" unless key.nil? || key.is_a?(String) || key.is_a?(Symbol)
            hooks = (@settings[:hooks] ||= {})
            (hooks[hook] ||= []) << (key ? Configuration::Hook.new(key.to_sym, block) : block)
          end
        end

        PLAIN.each do |key|
          define_method(key) { |value| set(key, numeric(value)) }
        end

        # Anything else in the file is a mistake worth stopping for.
        def method_missing(name, *_args)
          raise_here "unknown setting '#{name}'"
        end

        # No directive exists beyond the methods defined here.
        def respond_to_missing?(_name, _include_private = false)
          false
        end

        private

        # Record +value+ for +key+ and the config file line that set it.
        def set(key, value)
          @lines[key] = here
          @settings[key] = value
        end

        # "file:line" of the config file line running now (nil outside one).
        def here
          frame = caller_locations.find { |l| @paths.include?(l.path) }
          frame && "#{frame.path}:#{frame.lineno}"
        end

        # Numbers often come from ENV as strings ("10"); Configuration validates the rest.
        def numeric(value)
          case value
          when /\A\d+\z/ then Integer(value, 10)
          when /\A\d+\.\d+\z/ then Float(value)
          else value
          end
        end

        def integer(name, value)
          Integer(value.to_s, 10)
        rescue ArgumentError
          raise_here "#{name} must be integers, got #{value.inspect}"
        end

        # Raise ConfigError pointing at the line of the config file being evaluated.
        def raise_here(message)
          raise ConfigError, "#{here || @path}: #{message}"
        end

        # One warning line naming the file and line, printed once per line.
        def warn_here(message)
          where = here || @path
          return if @warned[[where, message]]

          @warned[[where, message]] = true
          Kernel.warn("margay: #{where}: #{message}")
        end
      end
    end
  end
end
