# frozen_string_literal: true

require "json"
require "rack/utils"
require_relative "../stats"

module Margay
  module Control
    # The control app: Puma's control app's requests and answers (pumactl,
    # metrics exporters and process managers speak to it). A Rack app over a
    # PumaLauncher: `GET /stats?token=T`; and Margay's own `GET /memory`
    # (each process's RSS and PSS, Stats.memory_report). Read-only answers are computed at
    # once; an action that ends or replaces the process (stop, halt,
    # restart, phased-restart, refork) is handed to the listener in
    # env[AFTER_RESPONSE], to run once the answer is written, so the client
    # always gets its answer before the process goes.
    class App
      OK = '{ "status": "ok" }'
      AFTER_RESPONSE = "margay.control.after_response"

      # @param launcher [PumaLauncher]
      # @param token [String, nil] the token every request must carry (nil: none)
      def initialize(launcher, token:)
        @launcher = launcher
        @token = token
      end

      def call(env)
        return respond(403, "Invalid auth token", "text/plain") unless authorized?(env["QUERY_STRING"].to_s)

        command = env["PATH_INFO"].to_s[%r{/([^/]+)\z}, 1]
        case command
        when "stats" then respond(200, JSON.generate(@launcher.stats))
        when "gc-stats" then respond(200, JSON.generate(GC.stat))
        when "memory" then respond(200, JSON.generate(Margay.memory_hash)) # Margay's: RSS/PSS per process (Stats::Memory)
        when "queue" then queue
        when "gc"
          GC.start
          respond(200, OK)
        when "thread-backtraces" then respond(200, JSON.generate(thread_backtraces))
        when "stop", "halt", "restart" then later(env, command) { @launcher.public_send(command.to_sym) }
        when "phased-restart" then later(env, command) { @launcher.phased_restart }
        when "reload-certificates" then later(env, command) { @launcher.reload_certificates } # Margay's own
        when "refork"
          @launcher.clustered? ? later(env, command) { @launcher.refork } : unavailable(command)
        when "reload-worker-directory" then unavailable(command)
        else respond(404, "Unsupported action", "text/plain")
        end
      end

      private

      # Margay's GET /queue: a cluster's connections and waiting threads per worker and its
      # listeners' backlogs (Cluster::QueueReport).
      def queue
        report = Margay.queue_hash
        report ? respond(200, JSON.generate(report)) : respond(404, "queue: cluster mode only", "text/plain")
      end

      # A "token=T" parameter among & or ; separated ones, as Puma reads it,
      # compared in constant time.
      def authorized?(query)
        return true if @token.nil?

        query.split(/[&;]/).any? do |pair|
          pair.start_with?("token=") && Rack::Utils.secure_compare(pair.delete_prefix("token="), @token)
        end
      end

      def later(env, _command, &action)
        env[AFTER_RESPONSE] = action
        respond(200, OK)
      end

      def unavailable(command)
        respond(404, "{ \"error\": \"#{command.tr('-', '_')} not available\" }")
      end

      def thread_backtraces
        @launcher.thread_status.map { |name, backtrace| { name: name, backtrace: backtrace } }
      end

      def respond(status, body, type = "application/json")
        [status, { "content-type" => type, "content-length" => body.bytesize.to_s }, [body]]
      end
    end
  end
end
