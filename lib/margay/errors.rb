# frozen_string_literal: true

module Margay
  # Every error class Margay defines, one place. The native extension looks
  # ClientGone and InvalidResponse up here (it defines none of its own).

  # A setting is unknown, malformed or contradicts another one (config file,
  # flags, rackup options). Public: the CLI turns it into exit status 64.
  class ConfigError < StandardError; end

  # A mistake on the command line, as opposed to one in the config file (exit status 64).
  class UsageError < StandardError; end

  # The rackup file raised while loading; #cause is the app's exception.
  class AppLoadError < StandardError; end

  # The connection a request held is gone (the client closed it, or the
  # request's token is stale: its response was already handed to the event
  # loop). Raised by the native engine's response calls.
  class ClientGone < IOError; end

  # The app's response breaks the Rack SPEC or HTTP (a bad status, header name
  # or value, a body longer than its content-length). Raised by the native
  # engine before anything reaches the wire; answered with a 500.
  class InvalidResponse < StandardError; end

  # Raised inside a pool thread whose app call ran past config.request_timeout
  # (answered with a 503). An Exception, not a StandardError, so that an app's
  # `rescue => e` does not swallow it.
  class RequestTimeout < Exception; end # rubocop:disable Lint/InheritException

  # Cluster mode: the mold's answer to a fork order was missing or malformed.
  # pid: the worker it named, if it got that far (nobody would supervise it).
  class MoldAnswerError < IOError
    attr_reader :pid

    def initialize(message, pid)
      super(message)
      @pid = pid
    end
  end

  # Raised inside pool threads still running the app when a forced stop ends
  # the grace period. An Exception for the same reason as RequestTimeout.
  class ForceShutdown < Exception; end # rubocop:disable Lint/InheritException

  # For `rescue`: whatever app code may raise (as in Puma, `exit` and
  # exceptions outside StandardError too), but a forced shutdown, which must
  # unwind the thread.
  APP_ERRORS = Module.new do
    def self.===(error)
      error.is_a?(Exception) && !error.is_a?(ForceShutdown)
    end
  end
end
