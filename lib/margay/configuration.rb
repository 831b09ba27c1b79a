# frozen_string_literal: true

require "socket"
require "tmpdir"
require_relative "errors"
require_relative "process/binder"

module Margay
  # The one frozen configuration object and THE list of settings and their
  # defaults. Built from DEFAULTS, then the config file (Configuration::DSL),
  # WEB_CONCURRENCY, then CLI flags or rackup options (Configuration::Sources
  # does that for both), and handed to every part that needs it. Never
  # mutated after #initialize.
  class Configuration
    autoload :DSL, File.expand_path("configuration/dsl", __dir__)
    autoload :PumaCompat, File.expand_path("configuration/puma_compat", __dir__)
    autoload :Sources, File.expand_path("configuration/sources", __dir__)

    # A value in the config file, a flag or an option is wrong. #setting names
    # it (and #value the bind, for binds) so that Sources can point at the
    # config file's line that set it.
    class InvalidSetting < ConfigError
      attr_reader :setting, :value

      def initialize(message, setting:, value: nil)
        super(message)
        @setting = setting
        @value = value
      end
    end

    # The host a bare port listens on, as Puma chooses it: "::" (dual stack:
    # IPv6 and IPv4 on one socket) when the machine has an IPv6 address other
    # than the loopback, else "0.0.0.0".
    # @param addresses [Array<Addrinfo>] the interfaces' addresses
    def self.default_host(addresses = Socket.getifaddrs.map(&:addr).compact)
      addresses.any? { |a| a.ipv6? && !a.ipv6_loopback? } ? "::" : "0.0.0.0"
    rescue SystemCallError, NotImplementedError
      "0.0.0.0"
    end

    # Every setting with its default. Sizes are bytes, times are seconds.
    DEFAULTS = {
      binds: ["tcp://#{(host = default_host).include?(':') ? "[#{host}]" : host}:9292"].freeze,
      ssl_pems: [].freeze,            # PEM text given to ssl_bind (cert_pem, key_pem); its ssl:// binds say store:N
      rackup: "config.ru",
      environment: nil, # resolved from APP_ENV / RACK_ENV / RAILS_ENV / "development", as Puma 8 does
      min_threads: 0,   # like Puma; one thread always waits for connections
      max_threads: 5,
      pidfile: nil,
      quiet: false,                   # no access log (Puma's quiet: the inverse of log_requests)
      log_requests: false,            # one access-log line per request on stdout
      silent: false,                  # nothing on stdout: no banner, info or access lines (Puma's -s)
      shutdown_timeout: 30,     # grace period for in-flight requests on TERM/INT
      header_timeout: 30,       # a request head must arrive within this (408)
      body_timeout: 30,         # longest pause while receiving a body (408)
      keepalive_timeout: 65,    # an idle keep-alive connection is closed after this
      write_timeout: 30,        # longest stall while a client reads a response
      max_keepalive_requests: 1000,
      max_request_target: 8192,       # longer request-target: 414
      max_header_size: 65_536,        # whole request head: 431
      max_headers: 100,               # header field count: 431
      max_body_size: 104_857_600,     # 100 MiB, larger body: 413 (nil: unlimited)
      body_buffer_size: 131_072,      # bodies above this go to an unlinked tempfile
      max_chunk_extensions: 4096,     # chunk-extension bytes per request: 400 beyond
      # Methods served, case-sensitive (others: 501); Puma 8's default list. :any: every token
      # of at most 20 bytes (longer: always 501).
      supported_http_methods: %w[HEAD GET POST PUT DELETE OPTIONS TRACE PATCH].freeze,
      max_connections: nil,           # nil: from RLIMIT_NOFILE
      thread_idle_timeout: 10,        # a thread above min_threads idle this long exits
      backlog: 1024,
      event_backend: :auto,           # :auto, :epoll, :poll
      tmpdir: nil,                    # nil: Dir.tmpdir
      response_buffer_limit: 4_194_304, # streamed output kept in memory; beyond it, a tempfile
      workers: 0,                     # cluster mode: worker processes (0: single process)
      preload_app: nil,               # load the app in the master before forking (nil: yes in cluster mode)
      balance_keepalive: true,        # cluster: a saturated worker hands waiting requests' connections to free workers
      request_timeout: nil,           # seconds an app call may run: 503 and the thread interrupted (nil: off)
      worker_memory_limit: nil,       # bytes of RSS after which a worker is gracefully replaced (nil: off)
      refork_after: nil,              # requests after which a warm worker becomes the mold (nil: only on URG)
      mold_boot: false,               # the master never loads the app: the first worker does, then forks the others as the mold
      prune_bundler: false,           # a master that never loads the app runs without Bundler (BundlerPrune)
      lean_heap: false,               # Ruby's GC keeps less free room in its heap: RUBY_GC_HEAP_FREE_SLOTS_* (LeanHeap)
      # Memory per worker: the template's heap before forking (Cluster::Heap)
      compact_before_fork: false,     # GC.compact in the mold (and a preloading master) before it forks
      heap_room_before_fork: nil,     # share of the template's object heap left free before it forks (nil: as the app left it)
      out_of_band_gc: nil,            # a cluster worker with no request running, N requests after its last: full GC + malloc_trim
      jemalloc: false,                # run on jemalloc: true (where the system installs it) or the library's path (Allocator)
      worker_timeout: 60,             # a worker silent this long is killed and replaced
      worker_boot_timeout: 60,        # a worker must report ready within this
      # Puma's operational surface (docs/CONFIGURATION.md maps every Puma name):
      control_url: nil,               # control app listener, "tcp://HOST:PORT" or "unix://PATH" (nil: off)
      control_token: nil,             # the control app's auth token (nil: a random one; "none": no token)
      state_path: nil,                # YAML state file for pumactl -S (pid, control_url, control_auth_token)
      plugins: [].freeze,             # Puma plugin names to load (`plugin :tmp_restart`)
      redirect_stdout: nil,           # path stdout is reopened to (stdout_redirect)
      redirect_stderr: nil,           # path stderr is reopened to
      redirect_append: false,         # append to the redirect files instead of truncating
      tag: nil,                       # shown in the process title
      directory: nil,                 # chdir here before loading the app (and on hot restart)
      lowlevel_error_handler: nil,    # callable(error, env, status) => Rack response for a 500
      log_formatter: nil,             # callable(String) => String for every server log line
      custom_logger: nil,             # receives the server log: an object with #write or #puts, or a Logger (#info)
      remote_address: :socket,        # REMOTE_ADDR: :socket, :localhost, or a fixed String
      remote_address_header: nil,     # REMOTE_ADDR from this request header (e.g. "X-Forwarded-For")
      proxy_protocol: nil,            # :v1: each connection starts with a PROXY v1 line
      queue_timeout: nil,             # seconds a complete request may wait for a thread: then 503 (nil: off)
      queue_time_header: false,       # add X-Request-Start: t=<arrival> to a request without one
      idle_timeout: nil,              # stop after this many seconds without a request (nil: never)
      # Behind a load balancer (docs/OPERATIONS.md):
      health_bind: nil,               # the engine's health listener (/livez, /readyz, /metrics), "tcp://HOST:PORT" (nil: off)
      agent_bind: nil,                # HAProxy agent-check listener (one line per connection), "tcp://HOST:PORT" (nil: off)
      health_check_path: nil,         # a GET/HEAD of this path on the main listeners is answered by the engine (nil: off)
      drain_delay: 0,                 # seconds between TERM and the graceful stop: unready, serving, connection: close
      force_shutdown_after: nil,      # seconds after a stop begins when requests are cut (nil: shutdown_timeout)
      restart_command: nil,           # the command a hot restart re-executes (nil: the original argv)
      worker_culling_strategy: :youngest, # which workers TTOU and a lower count stop first (:youngest, :oldest)
      app: nil,                       # a Rack app from the config file (Puma's `app`), served instead of the rackup file
      # Fiber mode (docs/CONFIGURATION.md "Fiber mode"):
      fiber_scheduler: false,         # each request in a Fiber under Margay's scheduler (epoll only)
      max_in_flight: 1024,            # fiber mode: requests in flight per process, at most
      max_io_threads: 0,              # Puma 8: threads beyond max_threads for requests marked I/O-bound
      hooks: {}.freeze                # name (one of HOOKS) => [callable or Hook]
    }.freeze

    # Hook names (Puma 8's canonical ones) a config file may register blocks
    # for; docs/CONFIGURATION.md "Hooks" says where and when each runs.
    HOOKS = %i[before_fork before_worker_fork after_worker_fork before_worker_boot before_worker_shutdown
               after_worker_shutdown before_restart before_refork after_refork before_thread_start
               before_thread_exit after_booted after_stopped out_of_band].freeze

    # Hooks that only run in cluster mode: a single process warns about them
    # at start, like Puma, and never runs them.
    CLUSTER_HOOKS = %i[before_fork before_worker_fork after_worker_fork before_worker_boot before_worker_shutdown
                       after_worker_shutdown before_refork].freeze

    # A hook block registered with Puma's +key+ (`before_worker_boot(:db) { |index, data| }`):
    # it also receives a Hash kept per key for the life of the worker process.
    Hook = Struct.new(:key, :block) do
      # Call the block with +args+, plus the key's Hash from +data+ (a Hash of Hashes) when there is one.
      def call(*args, data: nil)
        data ? block.call(*args, data[key] ||= {}) : block.call(*args)
      end
    end

    # The names of every setting.
    SETTINGS = DEFAULTS.keys.freeze

    # The host a bare port listens on (`-p`, `port 3000`, rackup's Port), and
    # the port when none is given: the default bind's.
    DEFAULT_BIND = DEFAULTS[:binds].first.match(%r{\Atcp://(?<host>.+):(?<port>\d+)\z})
    DEFAULT_HOST = DEFAULT_BIND[:host].delete_prefix("[").delete_suffix("]")
    DEFAULT_PORT = Integer(DEFAULT_BIND[:port], 10)
    private_constant :DEFAULT_BIND

    attr_reader(*SETTINGS)

    # "tcp://HOST:PORT" for +port+ (an Integer or digits) on +host+; an IPv6
    # host is bracketed. Raises ArgumentError unless port is a number.
    def self.tcp_bind(port, host = DEFAULT_HOST)
      host = host.to_s
      host = "[#{host}]" if host.include?(":") && !host.start_with?("[")
      "tcp://#{host}:#{Integer(port.to_s, 10)}"
    end

    # @param settings [Hash] overrides of DEFAULTS; unknown keys raise ConfigError.
    def initialize(**settings)
      unknown = settings.keys - SETTINGS
      raise ConfigError, "unknown setting(s): #{unknown.join(', ')}" unless unknown.empty?

      DEFAULTS.merge(settings).each { |key, value| instance_variable_set(:"@#{key}", deep_freeze(value)) }
      @environment ||= (ENV["APP_ENV"] || ENV["RACK_ENV"] || ENV["RAILS_ENV"] || "development").dup.freeze
      @tmpdir ||= Dir.tmpdir.dup.freeze
      validate!
      freeze
    end

    # A copy with some settings replaced (CLI flags over the config file).
    def with(**overrides) = self.class.new(**to_h.merge(overrides))

    # Every setting by name.
    def to_h = SETTINGS.to_h { |key| [key, public_send(key)] }

    # True in the development environment (500 pages then show the backtrace).
    def development? = environment == "development"

    # The threads the pool keeps at minimum: one, so that a thread always waits; in fiber mode two
    # (when max_threads allows): one thread's sends and reads, without the GVL, beside another's Ruby.
    def effective_min_threads
      [min_threads, fiber_scheduler ? [2, max_threads].min : 1].max
    end

    # True when the app is loaded once in the master before forking workers.
    def preload_app?
      !mold_boot && (preload_app.nil? ? workers.positive? : preload_app)
    end

    # Run the blocks registered for hook +name+ with +args+, in order. A
    # block that raises is logged (on +log+, or stderr) and the next one runs:
    # a hook never takes the process down, as in Puma.
    # @param data [Hash, nil] the calling process's per-key hook data (Hook)
    def run_hook(name, *args, log: nil, data: nil)
      (hooks[name] || []).each do |block|
        block.is_a?(Hook) ? block.call(*args, data: data || {}) : block.call(*args)
      rescue StandardError => e
        log ? log.exception(e, "#{name} hook failed") : Kernel.warn("margay: #{name} hook failed: #{e.class}: #{e.message}")
      end
      nil
    end

    # The cluster-only hooks this configuration registers (a single process never runs them).
    def cluster_only_hooks
      CLUSTER_HOOKS.select { |name| hooks.key?(name) && !hooks[name].empty? }
    end

    private

    def deep_freeze(value)
      case value
      when Array then value.map { |v| deep_freeze(v) }.freeze
      when Hash then value.to_h { |k, v| [k, deep_freeze(v)] }.freeze
      when String then value.frozen? ? value : value.dup.freeze
      else value
      end
    end

    POSITIVE = %i[shutdown_timeout header_timeout body_timeout keepalive_timeout write_timeout
                  thread_idle_timeout worker_timeout worker_boot_timeout].freeze
    POSITIVE_INTEGERS = %i[max_threads max_keepalive_requests max_request_target max_header_size
                           max_headers body_buffer_size max_chunk_extensions backlog
                           response_buffer_limit].freeze
    # Positive Integers or nil (off).
    OPTIONAL_POSITIVE_INTEGERS = {
      worker_memory_limit: "a positive number of bytes", refork_after: "a positive number of requests",
      max_connections: "a positive integer", idle_timeout: "a positive number of seconds",
      out_of_band_gc: "a positive number of requests" }.freeze
    BOOLEANS = %i[quiet log_requests silent balance_keepalive redirect_append
                  compact_before_fork queue_time_header mold_boot prune_bundler lean_heap].freeze
    # Strings or nil.
    STRINGS = %i[pidfile state_path redirect_stdout redirect_stderr tag directory restart_command
                 control_token remote_address_header].freeze
    # Settings holding a callable, and what it is called with.
    CALLABLES = { lowlevel_error_handler: "(error, env, status)", log_formatter: "(line)", app: "(env)" }.freeze
    private_constant :POSITIVE, :POSITIVE_INTEGERS, :OPTIONAL_POSITIVE_INTEGERS, :BOOLEANS, :STRINGS, :CALLABLES

    def invalid(setting, message, value = nil)
      raise InvalidSetting.new(message, setting: setting, value: value)
    end

    def validate!
      POSITIVE.each do |key|
        value = public_send(key)
        invalid(key, "#{key} must be a positive number, got #{value.inspect}") unless value.is_a?(Numeric) && value.positive?
      end
      POSITIVE_INTEGERS.each do |key|
        value = public_send(key)
        invalid(key, "#{key} must be a positive integer, got #{value.inspect}") unless value.is_a?(Integer) && value.positive?
      end
      unless min_threads.is_a?(Integer) && min_threads >= 0 && min_threads <= max_threads
        invalid(:min_threads, "threads must be MIN:MAX with 0 <= MIN <= MAX, got #{min_threads}:#{max_threads}")
      end
      unless max_body_size.nil? || (max_body_size.is_a?(Integer) && max_body_size >= 0)
        invalid(:max_body_size, "max_body_size must be a non-negative integer or nil")
      end
      unless request_timeout.nil? || (request_timeout.is_a?(Numeric) && request_timeout.positive?)
        invalid(:request_timeout, "request_timeout must be a positive number of seconds or nil")
      end
      unless queue_timeout.nil? || (queue_timeout.is_a?(Numeric) && queue_timeout.positive? && queue_timeout.finite?)
        invalid(:queue_timeout, "queue_timeout must be a positive number of seconds or nil, got #{queue_timeout.inspect}")
      end
      OPTIONAL_POSITIVE_INTEGERS.each do |key, what|
        value = public_send(key)
        invalid(key, "#{key} must be #{what} or nil, got #{value.inspect}") unless value.nil? || (value.is_a?(Integer) && value.positive?)
      end
      invalid(:event_backend, "event_backend must be :auto, :epoll or :poll") unless %i[auto epoll poll].include?(event_backend)
      methods = supported_http_methods
      unless methods == :any || (methods.is_a?(Array) && methods.size.between?(1, 64) && methods.uniq == methods &&
                                 methods.all? { |m| m.is_a?(String) && m.match?(/\A[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,20}\z/) })
        invalid(:supported_http_methods, "supported_http_methods must be :any or 1..64 distinct method names " \
                                         "(tokens of 1..20 bytes), got #{methods.inspect}")
      end
      invalid(:binds, "at least one bind is required") if binds.empty?
      binds.each { |url| validate_bind(url) }
      invalid(:workers, "workers must be a non-negative integer") unless workers.is_a?(Integer) && workers >= 0
      validate_operational
      validate_fibers
      validate_hooks
    end

    # Fiber mode's settings. The poll backend has no epoll set to nest (core/waits.h).
    def validate_fibers
      invalid(:fiber_scheduler, "fiber_scheduler must be true or false, got #{fiber_scheduler.inspect}") unless [true, false].include?(fiber_scheduler)
      invalid(:max_in_flight, "max_in_flight must be a positive integer, got #{max_in_flight.inspect}") unless max_in_flight.is_a?(Integer) && max_in_flight.positive?
      unless max_io_threads.is_a?(Integer) && max_io_threads >= 0
        invalid(:max_io_threads, "max_io_threads must be a non-negative integer, got #{max_io_threads.inspect}")
      end
      return unless fiber_scheduler && event_backend == :poll

      invalid(:fiber_scheduler, "fiber mode needs the epoll event backend: drop fiber_scheduler or use event_backend :epoll/:auto")
    end

    # The settings behind Puma's operational directives.
    def validate_operational
      BOOLEANS.each do |key|
        value = public_send(key)
        invalid(key, "#{key} must be true or false, got #{value.inspect}") unless [true, false].include?(value)
      end
      invalid(:quiet, "quiet and log_requests contradict each other (quiet means no access log)") if quiet && log_requests
      invalid(:mold_boot, "mold_boot and preload_app contradict each other (with mold_boot the first worker loads the app, not the master)") if mold_boot && preload_app == true
      STRINGS.each do |key|
        value = public_send(key)
        next if value.nil? || (value.is_a?(String) && (!value.empty? || key == :tag)) # tag "": no tag in the title, as in Puma

        invalid(key, "#{key} must be a non-empty String, got #{value.inspect}")
      end
      CALLABLES.each do |key, args|
        value = public_send(key)
        invalid(key, "#{key} must respond to call#{args}, got #{value.inspect}") unless value.nil? || value.respond_to?(:call)
      end
      unless custom_logger.nil? || %i[write puts info].any? { |m| custom_logger.respond_to?(m) }
        invalid(:custom_logger, "custom_logger must respond to write, puts or info (a Logger), got #{custom_logger.inspect}")
      end
      unless plugins.is_a?(Array) && plugins.all? { |p| p.is_a?(String) && !p.empty? }
        invalid(:plugins, "plugins must be a list of plugin names, got #{plugins.inspect}")
      end
      validate_health
      if control_url
        invalid(:control_url, "control_url must be tcp://HOST:PORT or unix://PATH, got #{control_url.inspect}") unless control_url.is_a?(String)
        validate_bind(control_url, :control_url)
      end
      validate_remote_address
      unless [true, false].include?(jemalloc) || (jemalloc.is_a?(String) && !jemalloc.empty?)
        invalid(:jemalloc, "jemalloc must be true, false or the library's path, got #{jemalloc.inspect}")
      end
      unless (room = heap_room_before_fork).nil? || (room.is_a?(Numeric) && room.positive? && room < 1)
        invalid(:heap_room_before_fork, "heap_room_before_fork must be a share between 0 and 1 or nil, got #{room.inspect}")
      end
      unless force_shutdown_after.nil? || force_shutdown_after == -1 || (force_shutdown_after.is_a?(Numeric) && force_shutdown_after >= 0)
        invalid(:force_shutdown_after, "force_shutdown_after must be a number of seconds >= 0, -1 (never cut) or nil, " \
                                       "got #{force_shutdown_after.inspect}")
      end
      return if %i[youngest oldest].include?(worker_culling_strategy)

      invalid(:worker_culling_strategy, "worker_culling_strategy must be :youngest or :oldest, got #{worker_culling_strategy.inspect}")
    end

    def validate_health
      if health_bind
        invalid(:health_bind, "health_bind must be tcp://HOST:PORT or unix://PATH, got #{health_bind.inspect}") unless health_bind.is_a?(String)
        validate_bind(health_bind, :health_bind)
      end
      validate_agent_bind if agent_bind
      unless health_check_path.nil? || (health_check_path.is_a?(String) && health_check_path.match?(%r{\A/[!$&'()*+,;=:@%A-Za-z0-9._~/-]{0,254}\z}))
        invalid(:health_check_path, "health_check_path must be a path such as \"/up\" (no query, at most 255 bytes), " \
                                    "got #{health_check_path.inspect}")
      end
      return if drain_delay.is_a?(Numeric) && drain_delay >= 0 && drain_delay.finite?

      invalid(:drain_delay, "drain_delay must be a number of seconds >= 0, got #{drain_delay.inspect}")
    end

    def validate_agent_bind
      unless agent_bind.is_a?(String) && agent_bind.start_with?("tcp://")
        return invalid(:agent_bind, "agent_bind must be tcp://HOST:PORT, got #{agent_bind.inspect}")
      end
      validate_bind(agent_bind, :agent_bind)
      invalid(:agent_bind, "agent_bind and health_bind must differ, both are #{agent_bind.inspect}") if agent_bind == health_bind
    end

    def validate_remote_address
      unless remote_address == :socket || remote_address == :localhost || (remote_address.is_a?(String) && !remote_address.empty?)
        invalid(:remote_address, "remote_address must be :socket, :localhost or an address String, got #{remote_address.inspect}")
      end
      unless remote_address_header.nil? || remote_address_header.match?(/\A[A-Za-z0-9!#$%&'*+.^_`|~-]+\z/)
        invalid(:remote_address_header, "remote_address_header must be a header name, got #{remote_address_header.inspect}")
      end
      # Both together is a chain (a PROXY v1 balancer in front of an HTTP proxy): the
      # header's address wins where the request has one, else the PROXY line's.
      invalid(:proxy_protocol, "proxy_protocol must be nil or :v1, got #{proxy_protocol.inspect}") unless [nil, :v1].include?(proxy_protocol)
      return unless proxy_protocol && binds.any? { |url| url.to_s.start_with?("ssl://") }

      invalid(:proxy_protocol, "proxy_protocol :v1 with an ssl:// bind is not supported yet (the PROXY line comes before the TLS handshake)")
    end

    def validate_hooks
      raise ConfigError, "hooks must be a Hash of name => [callables]" unless hooks.is_a?(Hash)

      hooks.each do |name, blocks|
        raise ConfigError, "unknown hook #{name.inspect} (known: #{HOOKS.join(', ')})" unless HOOKS.include?(name)
        raise ConfigError, "hook #{name} must be a list of callables" unless blocks.is_a?(Array) && blocks.all? { |b| b.respond_to?(:call) }
      end
    end

    def validate_bind(url, setting = :binds)
      Binder.parse(url)
    rescue ConfigError => e
      invalid(setting, e.message, url)
    end
  end
end
