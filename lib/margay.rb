# frozen_string_literal: true

# Margay: a Rack 3 HTTP/1.1 server whose I/O hot path runs in C without the GVL.
# This file is the load index: version, errors, then the parts. Cluster mode
# (margay/cluster) is required by the launcher when it starts a cluster.
require_relative "margay/version"
require_relative "margay/errors"
require_relative "margay/stats" # Margay.stats / Margay.stats_hash, as Puma.stats

module Margay
  autoload :Clock, "margay/clock"
  autoload :Log, "margay/log"
  autoload :Configuration, "margay/configuration"
  autoload :CLI, "margay/cli"
  autoload :Launcher, "margay/launcher"
  autoload :Binder, "margay/process/binder"
  autoload :Systemd, "margay/process/systemd"
  autoload :Reexec, "margay/process/reexec"
  autoload :Runner, "margay/runner"
  autoload :Single, "margay/single"
  autoload :Server, "margay/server"
  autoload :DemoApp, "margay/launcher/demo_app"
  autoload :Metrics, "margay/metrics"
  autoload :Operations, "margay/control/operations"
  autoload :PumaLauncher, "margay/control/puma_launcher"
  autoload :Plugins, "margay/control/plugins"
end
