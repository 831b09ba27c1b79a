# frozen_string_literal: true

require "rack/constants"

module Margay
  # Rack env keys Margay sets that Rack 3.0's Rack:: constants do not name
  # (the others are used as Rack::RACK_INPUT, Rack::RACK_HIJACK, ...).

  # The 103 Early Hints callable (Rack::RACK_EARLY_HINTS only from Rack 3.1 on).
  RACK_EARLY_HINTS = "rack.early_hints"

  # The hijacked socket, set after a full hijack (Rack 2's key, which some
  # apps still read after calling rack.hijack).
  RACK_HIJACK_IO = "rack.hijack_io"

  # A TLS client's verified certificate (an OpenSSL::X509::Certificate), Puma's key.
  PUMA_PEERCERT = "puma.peercert"
end
