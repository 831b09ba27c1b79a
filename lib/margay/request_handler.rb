# frozen_string_literal: true

require "socket"
require_relative "stream"
require_relative "deadline"

module Margay
  # Internal: runs the application for one request the engine handed over,
  # sends its response through the engine, and maps every failure to an HTTP
  # outcome in one place (#fail_request). Always closes the body and calls the
  # rack.response_finished callbacks.
  class RequestHandler
    RACK_INPUT = "rack.input"
    RACK_HIJACK = "rack.hijack"
    RACK_HIJACK_IO = "rack.hijack_io"
    RACK_EARLY_HINTS = "rack.early_hints"
    RACK_RESPONSE_FINISHED = "rack.response_finished"

    # Exceptions from the app that become a 500; anything else (SystemExit,
    # Interrupt, a forced shutdown) still unwinds the thread, after cleanup.
    APP_ERRORS = [StandardError, ScriptError, SystemStackError, NoMemoryError].freeze

    # rack.early_hints: send a 103 before the final response.
    class EarlyHints
      def initialize(engine, token)
        @engine = engine
        @token = token
      end

      def call(headers)
        @engine.early_hints(@token, headers)
      rescue ClientGone
        nil
      end
    end

    # rack.hijack (full hijack): the app takes the socket and answers by itself.
    class Hijack
      attr_reader :io

      def initialize(engine, token, env)
        @engine = engine
        @token = token
        @env = env
        @io = nil
      end

      def call
        return @io if @io

        fd, _buffered = @engine.hijack(@token)
        @io = Socket.for_fd(fd)
        @io.autoclose = true
        @env[RACK_HIJACK_IO] = @io
      end
    end

    # @param deadline [Deadline, nil] enforces request_timeout when set
    def initialize(app, engine, config, log, counters, deadline: nil)
      @app = app
      @engine = engine
      @log = log
      @deadline = deadline
      @development = config.development?
      @access_log = config.log_requests
      @counters = counters
    end

    # Handle one request. Returns the token to continue with when a pipelined
    # request is already buffered on the same connection, else nil.
    def call(token, env)
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC) if @access_log
      input = env[RACK_INPUT]
      hijack = Hijack.new(@engine, token, env)
      env[RACK_HIJACK] = hijack
      env[RACK_EARLY_HINTS] = EarlyHints.new(@engine, token)
      callbacks = env[RACK_RESPONSE_FINISHED] = []
      status = headers = body = error = nil
      continue_with = nil
      begin
        status, headers, body = @deadline ? @deadline.track(env) { @app.call(env) } : @app.call(env)
        continue_with = hijack.io ? nil : send_response(token, env, status, headers, body)
      rescue *APP_ERRORS, RequestTimeout => e
        error = e
        status = fail_request(token, env, e)
      ensure
        close_body(body, env)
        input.close if input.is_a?(File) && !input.closed?
        finish_callbacks(callbacks, env, status, headers, error)
        log_access(env, status, started) if @access_log
      end
      continue_with
    rescue Exception # rubocop:disable Lint/RescueException -- the thread is unwinding (ForceShutdown, a fatal error)
      # Free the connection this request holds, or the one a pipelined request
      # would have continued on; a no-op once the response went to the loop.
      @engine.abort(continue_with || token)
      raise
    end

    private

    def send_response(token, env, status, headers, body)
      return @engine.respond(token, status, headers, body) if body.instance_of?(Array) && !hijack_header?(headers)

      if body.respond_to?(:to_path) && !body.respond_to?(:call) && !hijack_header?(headers)
        result = @engine.respond_file(token, status, headers, body.to_path)
        return result unless result == false
      end
      if body.respond_to?(:to_ary) && !hijack_header?(headers)
        return @engine.respond(token, status, headers, body.to_ary)
      end

      stream(token, env, status, headers, body)
    end

    def hijack_header?(headers)
      headers.is_a?(Hash) && headers.key?(RACK_HIJACK)
    end

    # Bodies of unknown length, streaming bodies and partial hijack.
    def stream(token, env, status, headers, body)
      return partial_hijack(token, status, headers) if hijack_header?(headers)
      return stream_each(token, status, headers, body) if body.respond_to?(:each)
      raise InvalidResponse, "body must respond to each or call, got #{body.class}" unless body.respond_to?(:call)

      @engine.stream_start(token, status, headers)
      body.call(Stream.new(@engine, token, env[RACK_INPUT]))
      @engine.stream_finish(token)
    end

    # The rack.hijack response header: send the head, then the app owns the
    # socket (the body is ignored, as the SPEC says).
    def partial_hijack(token, status, headers)
      callback = @engine.stream_start(token, status, headers)
      @engine.flush(token)
      fd, _buffered = @engine.hijack(token)
      io = Socket.for_fd(fd)
      io.autoclose = true
      callback.call(io)
      nil
    end

    # An each-body: the head goes out with the first chunk, so a body that
    # raises before yielding anything still gets a clean 500.
    def stream_each(token, status, headers, body)
      started = false
      body.each do |chunk|
        unless started
          @engine.stream_start(token, status, headers)
          started = true
        end
        @engine.stream_write(token, chunk)
      end
      started ? @engine.stream_finish(token) : @engine.respond(token, status, headers, [])
    end

    # The one place where failures become HTTP: a 500 when nothing was sent
    # yet, otherwise the connection is closed (the client sees a cut response,
    # never a wrong one). Returns the status that was sent, if any.
    def fail_request(token, env, error)
      case error
      when ClientGone
        @engine.abort(token)
        return nil
      when InvalidResponse
        @log.error("invalid response from the app for #{env['REQUEST_METHOD']} #{env['PATH_INFO']}: #{error.message}")
      when RequestTimeout
        nil # Deadline logged the path and backtrace
      else
        @log.exception(error, "app error for #{env['REQUEST_METHOD']} #{env['PATH_INFO']}")
      end
      @counters[:errors] += 1
      begin
        return abort_started(token) if @engine.response_started?(token)

        send_500(token, error)
      rescue ClientGone
        nil
      end
    end

    def abort_started(token)
      @engine.abort(token)
      nil
    end

    def send_500(token, error)
      if error.is_a?(RequestTimeout)
        @engine.error_response(token, 503)
        return 503
      end
      if @development
        text = "#{error.class}: #{error.message}\n\n#{(error.backtrace || []).join("\n")}\n"
        @engine.respond(token, 500, { "content-type" => "text/plain; charset=utf-8", "connection" => "close" }, [text])
      else
        @engine.error_response(token, 500)
      end
      500
    end

    def close_body(body, env)
      body.close if body.respond_to?(:close)
    rescue *APP_ERRORS => e
      @log.exception(e, "body#close raised for #{env['REQUEST_METHOD']} #{env['PATH_INFO']}")
    end

    def finish_callbacks(callbacks, env, status, headers, error)
      callbacks.reverse_each do |callback|
        callback.call(env, status, headers, error)
      rescue *APP_ERRORS => e
        @log.exception(e, "rack.response_finished callback raised")
      end
    end

    def log_access(env, status, started)
      ms = ((Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) * 1000).round(2)
      time = Time.now.strftime("%d/%b/%Y:%H:%M:%S %z")
      @log.access(%(#{env['REMOTE_ADDR']} - - [#{time}] "#{env['REQUEST_METHOD']} #{env['REQUEST_URI']} ) +
                  %(#{env['SERVER_PROTOCOL']}" #{status || '-'} - #{ms}ms))
    end
  end
end
