# frozen_string_literal: true

module Margay
  # Internal: the server's event log and access log. Thread-safe: each line is
  # written with a single IO#write call.
  class Log
    # The streams it writes to.
    attr_reader :out, :err

    # How log lines name a request: "GET /path".
    def self.request(env)
      "#{env['REQUEST_METHOD']} #{env['PATH_INFO']}"
    end

    # @param out [IO] banner, events and access lines
    # @param err [IO] warnings and errors
    # @param quiet [Boolean] drop info lines (warnings and errors still go out)
    def initialize(out: $stdout, err: $stderr, quiet: false)
      @out = out
      @err = err
      @quiet = quiet
    end

    # An event line (dropped when quiet).
    def info(message)
      write(@out, message) unless @quiet
    end

    # A warning line, on err.
    def warn(message)
      write(@err, "WARN: #{message}")
    end

    # An error line, on err.
    def error(message)
      write(@err, "ERROR: #{message}")
    end

    # Log an exception with its class, message and backtrace.
    def exception(error, context)
      trace = (error.backtrace || []).first(30).map { |line| "    #{line}" }.join("\n")
      write(@err, "ERROR: #{context}: #{error.class}: #{error.message}\n#{trace}")
    end

    # One access-log line (already formatted).
    def access(line)
      write(@out, line)
    end

    private

    def write(io, line)
      io.write(line.end_with?("\n") ? line : "#{line}\n")
    rescue IOError, SystemCallError
      nil # a closed or broken log stream must never take a request down
    end
  end
end
