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
      def self.load(path)
        source = File.read(path)
      rescue SystemCallError => e
        raise ConfigError, "cannot read config file #{path}: #{e.message.sub(/ @ \w+/, '')}"
      else
        evaluate(source, path)
      end

      # Evaluate +source+ as if it were the file +path+. Returns a Hash of settings.
      def self.evaluate(source, path = "(config)")
        evaluator = Evaluator.new(path)
        evaluator.instance_eval(source, path, 1)
        evaluator.settings
      rescue ConfigError
        raise
      rescue SyntaxError => e
        # The message already starts with "path:line:"; keep its first line only.
        raise ConfigError, e.message.lines.first.chomp
      rescue ScriptError, StandardError => e
        raise ConfigError, "#{location(e, path)}#{e.message.lines.first&.chomp} (#{e.class})"
      end

      # "file:line: " of the innermost frame inside the config file.
      def self.location(error, path)
        line = (error.backtrace_locations || []).find { |l| l.path == path }&.lineno
        line ? "#{path}:#{line}: " : "#{path}: "
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
        PLAIN = (Configuration::SETTINGS - %i[binds workers environment pidfile rackup quiet log_requests
                                             event_backend tmpdir hooks preload_app] -
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

        # @param path [String] the file's name, for error messages
        def initialize(path)
          @path = path
          @settings = {}
        end

        # The collected settings (a copy).
        def settings
          @settings.dup
        end

        # Listen on +url+ (tcp://HOST:PORT or unix://PATH). Repeatable.
        def bind(url)
          (@settings[:binds] ||= []) << url.to_s
        end

        # Listen on tcp://HOST:PORT (HOST defaults to the default bind's, 0.0.0.0). Repeatable, adds to bind.
        def port(number, host = DEFAULT_HOST)
          bind(Configuration.tcp_bind(number, host))
        rescue ArgumentError
          raise_here "port must be an integer, got #{number.inspect}"
        end

        # The thread pool size: +threads 2, 8+, or +threads 5+ for 5:5.
        def threads(min, max = min)
          @settings[:min_threads] = integer(:threads, min)
          @settings[:max_threads] = integer(:threads, max)
        end

        # The environment reported to the app (sets RACK_ENV).
        def environment(name)
          @settings[:environment] = name.to_s
        end

        # Write the process id to +path+ while running.
        def pidfile(path)
          @settings[:pidfile] = path.to_s
        end

        # The rackup file to serve (default config.ru).
        def rackup(path)
          @settings[:rackup] = path.to_s
        end

        # No banner or info lines (warnings and errors still print).
        def quiet(flag = true)
          @settings[:quiet] = flag ? true : false
        end

        # One access-log line per request on stdout.
        def log_requests(flag = true)
          @settings[:log_requests] = flag ? true : false
        end

        # :auto, :epoll or :poll.
        def event_backend(name)
          @settings[:event_backend] = name.to_sym
        end

        # Where request bodies above body_buffer_size are buffered.
        def tmpdir(path)
          @settings[:tmpdir] = path&.to_s
        end

        # Worker processes (cluster mode): a number, or :auto for one per CPU.
        def workers(count)
          return @settings[:workers] = 0 if count.nil?

          @settings[:workers] = DSL.worker_count(count) || raise_here("workers must be a number or :auto, got #{count.inspect}")
        end

        # Load the app in the master before forking (Puma's preload_app!).
        def preload_app!(flag = true)
          @settings[:preload_app] = flag ? true : false
        end

        # The same as preload_app!.
        def preload_app(flag = true)
          preload_app!(flag)
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
          define_method(key) { |value| @settings[key] = numeric(value) }
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
          line = caller_locations.find { |l| l.path == @path }&.lineno
          raise ConfigError, "#{@path}#{":#{line}" if line}: #{message}"
        end
      end
    end
  end
end
