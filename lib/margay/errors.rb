# frozen_string_literal: true

module Margay
  # The connection a request held is gone (the client closed it, or the
  # request's token is stale: its response was already handed to the event
  # loop). Raised by the native engine's response calls.
  class ClientGone < IOError; end

  # The app's response breaks the Rack SPEC or HTTP (a bad status, header name
  # or value, a body longer than its content-length). Raised by the native
  # engine before anything reaches the wire; answered with a 500.
  class InvalidResponse < StandardError; end
end
