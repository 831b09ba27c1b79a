# frozen_string_literal: true

require_relative "process/binder"
require_relative "process/reexec"
require_relative "version"

module Margay
  # What single mode (Server) and cluster mode (Cluster, the master) share,
  # mixed into both: the configuration, the log and the listening sockets,
  # which Ruby owns. A module, not a base class, so that the files that
  # reopen Server or Cluster need not load it.
  module Runner
    # The signal that prints every thread's backtrace, as Puma's: INFO where
    # the system has it (BSD, macOS), else PWR (Linux).
    BACKTRACE_SIGNAL = %w[INFO PWR].find { |name| Signal.list.key?(name) }

    # The signal that reads the TLS listeners' certificates and keys again (Margay's own: Puma
    # has no reload, and uses every other signal a server is sent; docs/SIGNALS.md).
    TLS_RELOAD_SIGNAL = "ALRM"

    attr_reader :config, :listeners

    # The TLS listeners' certificates read again (Margay::TLS.reload), in this process.
    def reload_tls(who = "")
      TLS.reload(@listeners || [], @log, who)
    end

    # The health listeners (health_bind: the engine answers /livez, /readyz, /metrics; agent_bind:
    # one HAProxy agent-check line), [] without.
    def health_listeners
      @health_listeners || []
    end

    # Whether +listener+ (one of health_listeners) is the agent_bind one.
    def agent_listener?(listener)
      !@config.agent_bind.nil? && listener.bind == @config.agent_bind
    end

    # The process title, like Puma's: "margay VERSION (BINDS) [TAG]"; the
    # tag defaults to the directory's name, as in Puma.
    def self.title(config, addresses)
      tag = config.tag || File.basename(Dir.pwd)
      "margay #{VERSION} (#{addresses.join(',')})#{" [#{tag}]" unless tag.to_s.empty?}"
    end

    # @param config [Configuration]
    # @param log [Log]
    # @param listeners [Array<Binder::Listener>, nil] already bound listeners
    #   (a cluster worker's, inherited from the master); nil: bind config.binds
    # @param health_listeners [Array<Binder::Listener>, nil] already bound health
    #   listeners (a cluster worker's); nil: bind config.health_bind
    def initialize(config, log:, listeners: nil, health_listeners: nil)
      @config = config
      @log = log
      @listeners = listeners
      @health_listeners = health_listeners
    end

    # Open every listener in config.binds (or take over inherited ones) and the
    # health listener, unless they are open already. Returns self.
    def bind
      @listeners ||= Binder.open(@config.binds, backlog: @config.backlog, pems: @config.ssl_pems)
      @health_listeners ||= bind_health
      self
    end

    # Seconds requests in flight get after a stop: Puma's force_shutdown_after
    # when set (negative: forever, 0: at once), else shutdown_timeout.
    def grace_period
      limit = @config.force_shutdown_after
      return @config.shutdown_timeout if limit.nil?

      limit.negative? ? Float::INFINITY : limit
    end

    # The addresses actually bound, e.g. ["tcp://127.0.0.1:43121"].
    def addresses
      (@listeners || []).map(&:url)
    end

    # Replace this process (same pid) by the restart command, with the
    # listeners and the health listeners inherited (Reexec.exec). Returns only when exec fails.
    def reexec(argv, env: {}, fds: {})
      health = health_listeners.reject { |l| l.io.closed? }
      env = env.merge(Binder::INHERIT_HEALTH_ENV => (health.map { |l| "#{l.bind}=#{l.io.fileno}" }.join(",") unless health.empty?))
      Reexec.exec(@config, @listeners, argv, env: env, fds: fds.merge(health.to_h { |l| [l.io.fileno, l.io.fileno] }))
    end

    private

    # The health listeners of config.health_bind and config.agent_bind (those a hot restart handed
    # over, else bound now); a warning when one listens beyond the host.
    def bind_health
      inherited = ENV.delete(Binder::INHERIT_HEALTH_ENV) # one no longer configured is closed
      binds = [@config.health_bind, @config.agent_bind].compact
      listeners = Binder.new(binds, backlog: @config.backlog, inherited: inherited).bind
      listeners.reject { |l| l.unix || l.io.local_address.ipv4_loopback? || l.io.local_address.ipv6_loopback? }.each do |l|
        what = agent_listener?(l) ? "agent_bind #{l.url} is not a loopback address: its load and drain line answers" : \
          "health_bind #{l.url} is not a loopback address: /livez, /readyz and /metrics answer"
        @log.warn("#{what} anyone who can reach it (keep the port off public networks)")
      end
      listeners
    end
  end
end
