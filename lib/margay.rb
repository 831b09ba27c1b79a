# frozen_string_literal: true

# Margay: a Rack 3 HTTP/1.1 server whose I/O hot path runs in C without the GVL.
# This file is the load index: version, then the parts.
require_relative "margay/version"

module Margay
  autoload :Configuration, "margay/configuration"
  autoload :ConfigError, "margay/configuration"
  autoload :Server, "margay/server"
  autoload :CLI, "margay/cli"
  autoload :DSL, "margay/dsl"
  autoload :Launcher, "margay/launcher"
  autoload :DemoApp, "margay/demo_app"
  autoload :Log, "margay/log"
end
