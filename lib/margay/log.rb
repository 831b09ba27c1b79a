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
    # @param formatter [#call, nil] every line passes through it (Puma's log_formatter)
    # @param logger [#write, nil] receives every line instead of out and err (Puma's custom_logger)
    def initialize(out: $stdout, err: $stderr, quiet: false, formatter: nil, logger: nil)
      logger = LoggerSink.new(logger) if logger && !logger.respond_to?(:write)
      @out = logger || out
      @err = logger || err
      @quiet = quiet
      @formatter = formatter
    end

    # This log with +config+'s log_formatter and custom_logger applied (self when it sets neither).
    def configured(config)
      return self unless config.log_formatter || config.custom_logger

      Log.new(out: @out, err: @err, quiet: @quiet, formatter: config.log_formatter, logger: config.custom_logger)
    end

    # Reopen $stdout and $stderr to +config+'s redirect_stdout/redirect_stderr
    # files (Puma's stdout_redirect). +append+: keep what the files hold (a
    # HUP, a hot restart) instead of following redirect_append. Returns
    # whether anything is redirected.
    def self.redirect(config, append: config.redirect_append)
      mode = append ? "a" : "w"
      # Open every file first: IO#reopen(path) closes the stream before it
      # opens the file (freopen), so a file that cannot be opened would leave
      # no stdout at all (every later write EBADF, the next HUP too); and
      # either both streams move or neither does.
      opened = {}
      { $stdout => config.redirect_stdout, $stderr => config.redirect_stderr }.each do |io, path|
        opened[io] = File.open(path, mode) if path
      end
      opened.each do |io, file|
        io.reopen(file)
        io.sync = true
      end
      !opened.empty?
    ensure
      opened&.each_value { |file| file.close unless file.closed? }
    end

    # An exception's message; it is app code (#message may be overridden),
    # and one that raises must not turn the report of an error into another.
    def self.message(error)
      error.message
    rescue StandardError => e
      "(its #message raised #{e.class})"
    end

    # HUP: #redirect again, appending. A file that cannot be opened (its
    # directory gone, no permission, no descriptor) is said on +log+ (+who+
    # starts the line) and the output stays where it was; never raises.
    def self.reopen(config, log, who)
      redirect(config, append: true)
    rescue SystemCallError, IOError => e
      log.error("#{who}HUP: could not reopen the redirected logs (#{e.message}); they stay where they were")
    end

    # #reopen from a trap (single mode, a cluster worker): in a thread, since
    # a trap may not take the locks reopening takes.
    def self.reopen_later(config, log, who)
      Thread.new { reopen(config, log, who) }
    rescue ThreadError # no thread to be had (a pids limit): the output stays where it was
      nil
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
      write(@err, "ERROR: #{context}: #{error.class}: #{Log.message(error)}\n#{trace}")
    end

    # One step of a loop that must carry on past an error that may come back every turn: the
    # block's value, or nil when it raised (a StandardError), said with +context+ once per
    # class and raising line (+seen+, a Set the caller keeps).
    def guard(context, seen)
      yield
    rescue StandardError => e
      exception(e, context) if seen.add?([e.class, e.backtrace&.first])
      nil
    end

    # Every thread's name and backtrace (Puma's INFO/PWR signal), one block each.
    def thread_backtraces(threads = Thread.list)
      threads.each do |thread|
        name = "Thread: TID-#{thread.object_id.to_s(36)}#{" #{thread.name}" if thread.name}"
        write(@out, [name, *(thread.backtrace || ["<no backtrace available>"]).map { |line| "  #{line}" }].join("\n"))
      end
    end

    # One access-log line (already formatted).
    def access(line)
      write(@out, line)
    end

    # A custom_logger without #write (a Logger: #info; or #puts) as the
    # stream the log writes its lines to.
    class LoggerSink
      def initialize(logger)
        @logger = logger
      end

      def write(line)
        @logger.respond_to?(:puts) ? @logger.puts(line.chomp) : @logger.info(line.chomp)
      end
    end

    private

    def write(io, line)
      line = line.each_line(chomp: true).map { |l| "#{@formatter.call(l)}\n" }.join if @formatter # each line, as Puma
      io.write(line.end_with?("\n") ? line : "#{line}\n")
    rescue IOError, SystemCallError
      nil # a closed or broken log stream must never take a request down
    rescue StandardError => e # a formatter or custom logger that raises: the line still goes out, unformatted
      fallback(line, e)
    end

    def fallback(line, error)
      $stderr.write("#{line.chomp} (log_formatter/custom_logger raised #{error.class}: #{Log.message(error)})\n")
    rescue IOError, SystemCallError
      nil
    end
  end
end
