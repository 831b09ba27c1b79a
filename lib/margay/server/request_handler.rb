# frozen_string_literal: true

require_relative "../errors"
require_relative "../clock"
require_relative "../log"
require_relative "../constants"
require_relative "../version"
require_relative "stream"
require_relative "hijack"
require_relative "tunnel"
require_relative "upgrade"

module Margay
  class Server
    # Internal: what every pool thread does (#serve): wait in the engine for a
    # request, run the application, send its response through the engine.
    # Every failure becomes an HTTP outcome in one place (#fail_request,
    # #status_for). The body is always closed and the rack.response_finished
    # callbacks always called.
    class RequestHandler
      # rack.early_hints: send a 103 before the final response. (The native
      # engine makes a plain request's itself, with the same instance
      # variables: Native::Engine#request_objects.)
      class EarlyHints
        # For the request of +token+ on +engine+.
        def initialize(engine, token)
          @engine = engine
          @token = token
        end

        # Send +headers+ as a 103 Early Hints (nothing if the client is gone).
        def call(headers)
          @engine.early_hints(@token, headers)
        rescue ClientGone
          nil
        end
      end

      # rack.input of a request without a body: one frozen, stateless object
      # shared by every such request (no StringIO and String per request). It
      # reads like an empty binary IO at its end, and rewinds and closes
      # without effect, so an app may still call everything it calls on a
      # StringIO input.
      class EmptyInput
        # nil (no line).
        def gets(*) = nil

        # Yields nothing.
        def each = self

        # "" when +length+ is nil or 0 (IO#read's answer at the end), else
        # nil; +buffer+ is emptied and returned in place of "".
        def read(length = nil, buffer = nil)
          buffer&.clear
          return nil if length&.positive?

          buffer || String.new(encoding: Encoding::BINARY)
        end

        # 0: always at the start, which is also the end.
        def rewind = 0

        def size = 0

        def eof? = true

        def close = nil

        def external_encoding = Encoding::BINARY
      end

      EMPTY_INPUT = EmptyInput.new.freeze

      # The env entries that are the same for every request; the engine
      # starts each request's env from them (rack.input: EMPTY_INPUT unless
      # the request has a body).
      def self.env_template(config)
        {
          Rack::RACK_INPUT => EMPTY_INPUT,
          Rack::SCRIPT_NAME => "",
          "SERVER_SOFTWARE" => "Margay/#{VERSION}",
          Rack::RACK_URL_SCHEME => "http",
          Rack::RACK_ERRORS => $stderr,
          Rack::RACK_IS_HIJACK => true,
          "rack.multithread" => config.max_threads > 1,
          "rack.multiprocess" => config.workers.positive?,
          "rack.run_once" => false
        }
      end

      # @param app [#call] the Rack application
      # @param engine [Native::Engine]
      # @param config [Configuration]
      # @param log [Log]
      # @param counters [Hash] the server's {errors:} counter, incremented here
      # @param deadline [Deadline, nil] enforces request_timeout when set
      # @param out_of_band [#call, nil] called by a thread after each request (Server#out_of_band)
      def initialize(app, engine, config, log, counters, deadline: nil, out_of_band: nil)
        @app = app
        @out_of_band = out_of_band
        @error_handler = config.lowlevel_error_handler
        @engine = engine
        @log = log
        @deadline = deadline
        @development = config.development?
        @access_log = config.log_requests
        @counters = counters
        @upgrade_timeouts = { read_timeout: config.keepalive_timeout, write_timeout: config.write_timeout }.freeze
        engine.request_objects(Hijack, EarlyHints) if engine.respond_to?(:request_objects)
      end

      # The loop of every pool thread: wait in the engine, run the app,
      # repeat; returns when the engine stops or +pool+ lets the thread go
      # after idling. RequestTimeout is deferred here: only the app call
      # itself takes it (Deadline#track).
      def serve(pool)
        Thread.handle_interrupt(RequestTimeout => :never) { serve_loop(pool) }
      end

      # Handle one request. Returns the token to continue with when a pipelined
      # request is already buffered on the same connection, else nil.
      # +hijack+: the rack.hijack the engine put in +env+ with rack.early_hints
      # and rack.response_finished, for a request with no Upgrade field, no
      # client certificate and no body in a tempfile (Native::Engine#request_objects);
      # nil: this method looks and makes them.
      def call(token, env, hijack = nil)
        started = Clock.now if @access_log
        if hijack
          callbacks = env[Rack::RACK_RESPONSE_FINISHED]
        else
          input = env[Rack::RACK_INPUT]
          hijack = Hijack.new(@engine, token, env)
          env[Rack::RACK_HIJACK] = hijack if env[Rack::RACK_IS_HIJACK] # false on HTTP/2 (other streams share the socket)
          env[PUMA_PEERCERT] = OpenSSL::X509::Certificate.new(env[PUMA_PEERCERT]) if env.key?(PUMA_PEERCERT) # DER from the engine
          env[RACK_EARLY_HINTS] = EarlyHints.new(@engine, token)
          Upgrade.prepare(env) if env.key?("HTTP_UPGRADE")
          callbacks = env[Rack::RACK_RESPONSE_FINISHED] = []
        end
        status = headers = body = error = nil
        continue_with = nil
        begin
          status, headers, body = @deadline ? @deadline.track(env) { @app.call(env) } : @app.call(env)
          continue_with = hijack.io ? nil : send_response(token, env, status, headers, body)
        rescue APP_ERRORS => e # a 500 and the thread serves on (RequestTimeout, `exit` in app code,
          # rack-timeout's RequestTimeoutException < Exception); only a forced shutdown unwinds it
          error = e
          status = fail_request(token, env, e)
        ensure
          close_body(body, env)
          input.close if input.is_a?(File) && !input.closed? # nil: the request had no tempfile
          finish_callbacks(callbacks, env, status, headers, error) unless callbacks.empty?
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

      def serve_loop(pool)
        continue_with = nil
        loop do
          request = @engine.next_request(continue_with, continue_with ? nil : pool.idle_budget)
          continue_with = nil
          if request.nil? # the engine stopped: so do the reads of upgraded streams
            Upgrade.stop_reading(@engine)
            break
          end

          if request == :timeout
            break if pool.leave?(Thread.current)

            next
          end
          token, env, hijack = request
          pool.grow_on_demand if pool.grow_on_demand? && @engine.starved?
          pool.busy!
          begin
            continue_with = call(token, env, hijack)
          ensure
            pool.idle!
          end
          @out_of_band&.call unless continue_with
          break if !continue_with && pool.retire?(Thread.current)
        end
      rescue Exception # rubocop:disable Lint/RescueException -- unwinding between two requests: free the connection
        @engine.abort(continue_with) if continue_with
        raise
      end

      def send_response(token, env, status, headers, body)
        if body.instance_of?(Array)
          result = @engine.respond(token, status, headers, body)
          return result unless result == false # false: a rack.hijack field, nothing sent (partial hijack below)
        end

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
        headers.is_a?(Hash) && headers.key?(Rack::RACK_HIJACK)
      end

      # Bodies of unknown length, streaming bodies and partial hijack.
      def stream(token, env, status, headers, body)
        return partial_hijack(token, status, headers) if hijack_header?(headers)
        return stream_each(token, status, headers, body) if body.respond_to?(:each)
        raise InvalidResponse, "body must respond to each or call, got #{body.class}" unless body.respond_to?(:call)
        return Tunnel.serve(@engine, token, status, headers, body, **@upgrade_timeouts) if Tunnel.request?(token, env)
        return Upgrade.serve(@engine, token, headers, body, **@upgrade_timeouts) if Upgrade.response?(status, headers, env)

        @engine.stream_start(token, status, headers)
        body.call(Stream.new(@engine, token, env[Rack::RACK_INPUT]))
        @engine.stream_finish(token)
      end

      # The rack.hijack response header: send the head, then the app owns the
      # socket (the body is ignored, as the SPEC says).
      def partial_hijack(token, status, headers)
        callback = @engine.stream_start(token, status, headers)
        @engine.flush(token)
        callback.call(Hijack.take(@engine, token))
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

      # The one place where failures become HTTP: an error response when
      # nothing was sent yet (#status_for), otherwise the connection is closed
      # (the client sees a cut response, never a wrong one). Returns the
      # status that was sent, if any.
      def fail_request(token, env, error)
        case error
        when ClientGone
          @engine.abort(token)
          return nil
        when InvalidResponse
          @log.error("invalid response from the app for #{Log.request(env)}: #{error.message}")
        when RequestTimeout
          nil # Deadline logged the path and backtrace
        else
          @log.exception(error, "app error for #{Log.request(env)}")
        end
        @counters[:errors] += 1
        return abort_started(token) if @engine.response_started?(token)

        send_error(token, status_for(error), error, env)
      rescue ClientGone
        nil
      end

      # The status a failure is answered with.
      def status_for(error)
        case error
        when RequestTimeout then 503 # the app ran past request_timeout
        else 500
        end
      end

      # Answer +status+: a 500 is the lowlevel_error_handler's response when
      # there is one; else in development a 500 shows the error and its
      # backtrace. Returns the status sent.
      def send_error(token, status, error, env)
        if status == 500 && @error_handler && (response = handled_error(error, env))
          begin
            if @engine.respond(token, *response) == false # a rack.hijack field: no hijack here
              @engine.respond(token, response[0], response[1].reject { |name, _| name == Rack::RACK_HIJACK }, response[2])
            end
            return response[0]
          rescue InvalidResponse => e
            @log.error("invalid response from lowlevel_error_handler: #{e.message}")
          end
        end
        if status == 500 && @development
          text = "#{error.class}: #{Log.message(error)}\n\n#{(error.backtrace || []).join("\n")}\n"
          @engine.respond(token, 500, { "content-type" => "text/plain; charset=utf-8", "connection" => "close" }, [text])
        else
          @engine.error_response(token, status)
        end
        status
      end

      # The lowlevel_error_handler's response, called like Puma calls it
      # (with the error, the env and the status, as many as it takes), as
      # [status, headers, Array body]; nil when it raised or answered
      # nonsense (logged: the plain 500 goes out).
      def handled_error(error, env)
        args = [error, env, 500]
        arity = @error_handler.respond_to?(:arity) ? @error_handler.arity : -1
        status, headers, body = @error_handler.call(*(arity.negative? ? args : args.first(arity)))
        chunks = []
        body.each { |chunk| chunks << chunk.to_s }
        body.close if body.respond_to?(:close)
        [Integer(status), headers.to_h, chunks]
      rescue APP_ERRORS => e
        @log.exception(e, "lowlevel_error_handler raised")
        nil
      end

      def abort_started(token)
        @engine.abort(token)
        nil
      end

      def close_body(body, env)
        body.close if body.respond_to?(:close)
      rescue APP_ERRORS => e
        @log.exception(e, "body#close raised for #{Log.request(env)}")
      end

      def finish_callbacks(callbacks, env, status, headers, error)
        callbacks.reverse_each do |callback|
          callback.call(env, status, headers, error)
        rescue APP_ERRORS => e
          @log.exception(e, "rack.response_finished callback raised")
        end
      end

      def log_access(env, status, started)
        ms = ((Clock.now - started) * 1000).round(2)
        time = Time.now.strftime("%d/%b/%Y:%H:%M:%S %z")
        @log.access(%(#{env['REMOTE_ADDR']} - - [#{time}] "#{env['REQUEST_METHOD']} #{env['REQUEST_URI']} ) +
                    %(#{env['SERVER_PROTOCOL']}" #{status || '-'} - #{ms}ms))
      end
    end
  end
end
