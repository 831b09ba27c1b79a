# frozen_string_literal: true

require "rbconfig"
require_relative "binder"
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

    # Set in the environment of a hot restart when stdout/stderr are
    # redirected: the new process appends to the files instead of truncating them.
    REDIRECTED_ENV = "MARGAY_REDIRECTED"

    attr_reader :config, :listeners

    # The command a hot restart executes: config.restart_command (Puma's
    # restart_cmd, split on spaces) followed by the original arguments, or
    # this Ruby running +argv+ (the script and its arguments) again.
    def self.restart_command(config, argv)
      return [RbConfig.ruby, *argv] unless config.restart_command

      [*config.restart_command.to_s.split(" "), *argv.drop(1)]
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
    def initialize(config, log:, listeners: nil)
      @config = config
      @log = log
      @listeners = listeners
    end

    # Open every listener in config.binds (or take over inherited ones) unless
    # they are open already. Returns self.
    def bind
      @listeners ||= Binder.open(@config.binds, backlog: @config.backlog)
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

    # Replace this process (same pid) by Runner.restart_command(config, +argv+),
    # run in config.directory, with the listeners inherited through
    # Binder::INHERIT_ENV so that no connection is refused meanwhile. +env+ and
    # +fds+ ({fd => fd}) add what else it inherits. Returns only when exec fails
    # (raises SystemCallError).
    def reexec(argv, env: {}, fds: {})
      inherit = @listeners.map { |l| "#{l.bind}=#{l.io.fileno}" }.join(",")
      env = { Binder::INHERIT_ENV => inherit, Binder::ACTIVATED_ENV => (@listeners.any?(&:activated) ? "1" : nil),
              REDIRECTED_ENV => (@config.redirect_stdout || @config.redirect_stderr ? "1" : nil) }.merge(env)
      inherited = @listeners.to_h { |l| [l.io.fileno, l.io.fileno] }.merge(fds)
      Dir.chdir(@config.directory) if @config.directory
      exec(env, *Runner.restart_command(@config, argv), inherited.merge(close_others: false))
    end
  end
end
