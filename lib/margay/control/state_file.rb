# frozen_string_literal: true

module Margay
  module Control
    # The state file pumactl -S reads (state_path): Puma's YAML subset, one
    # "key: value" a line (pid, control_url, control_auth_token,
    # running_from). Written at boot, removed at exit only while it still
    # names this process (a newer one may own it).
    class StateFile
      # @param path [String]
      def initialize(path)
        @path = File.expand_path(path)
        @written = false
      end

      attr_reader :path

      # Write the file for this process. control_url and token may be nil (left out).
      # @raise [ConfigError] the file cannot be written
      def write(control_url:, token:)
        lines = ["---", "pid: #{Process.pid}"]
        lines << "control_url: #{control_url}" if control_url
        lines << "control_auth_token: #{token}" if token
        lines << "running_from: #{Dir.pwd.inspect}"
        File.write(@path, "#{lines.join("\n")}\n")
        @written = true
      rescue SystemCallError => e
        raise ConfigError, "cannot write state file #{@path}: #{e.message.sub(/ @ \w+/, '')}"
      end

      # Remove the file if this process wrote it and it still names this process.
      def remove
        return unless @written

        @written = false
        File.unlink(@path) if File.read(@path)[/^pid: (\d+)$/, 1].to_i == Process.pid
      rescue SystemCallError
        nil
      end
    end
  end
end
