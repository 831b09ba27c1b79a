# frozen_string_literal: true

require "rbconfig"
require_relative "binder"

module Margay
  # Internal: a hot restart's exec, in single mode and in a cluster's master.
  # The process becomes the restart command (same pid) and inherits the
  # listeners, so that no connection is refused meanwhile.
  module Reexec
    # Set in the environment of a hot restart when stdout/stderr are
    # redirected: the new process appends to the files instead of truncating them.
    REDIRECTED_ENV = "MARGAY_REDIRECTED"

    # The command a hot restart executes: config.restart_command (Puma's
    # restart_cmd, split on spaces) followed by the original arguments, or
    # this Ruby running +argv+ (the script and its arguments) again.
    def self.command(config, argv)
      return [RbConfig.ruby, *argv] unless config.restart_command

      [*config.restart_command.to_s.split(" "), *argv.drop(1)]
    end

    # Replace this process by Reexec.command(+config+, +argv+), run in
    # config.directory, with +listeners+ inherited through Binder::INHERIT_ENV.
    # +env+ and +fds+ ({fd => fd}) add what else it inherits. Returns only
    # when exec fails (raises SystemCallError).
    def self.exec(config, listeners, argv, env: {}, fds: {})
      inherit = listeners.map { |l| "#{l.bind}=#{l.io.fileno}" }.join(",")
      env = { Binder::INHERIT_ENV => inherit, Binder::ACTIVATED_ENV => (listeners.any?(&:activated) ? "1" : nil),
              REDIRECTED_ENV => (config.redirect_stdout || config.redirect_stderr ? "1" : nil) }.merge(env)
      inherited = listeners.to_h { |l| [l.io.fileno, l.io.fileno] }.merge(fds)
      Dir.chdir(config.directory) if config.directory
      Kernel.exec(env, *command(config, argv), inherited.merge(close_others: false))
    end
  end
end
