# frozen_string_literal: true

require_relative "binder"

module Margay
  # What single mode (Server) and cluster mode (Cluster, the master) share:
  # the configuration, the log and the listening sockets, which Ruby owns.
  class Runner
    attr_reader :config, :listeners

    # @param config [Configuration]
    # @param log [Log]
    # @param listeners [Array<Binder::Listener>, nil] already bound listeners
    #   (a cluster worker's, inherited from the master); nil: bind config.binds
    def initialize(config, log:, listeners: nil)
      @config = config
      @log = log
      @listeners = listeners
    end

    # Open every listener in config.binds (or take over inherited ones) unless
    # they are open already. Returns self.
    def bind
      @listeners ||= Binder.open(@config.binds, backlog: @config.backlog)
      self
    end

    # The addresses actually bound, e.g. ["tcp://127.0.0.1:43121"].
    def addresses
      (@listeners || []).map(&:url)
    end
  end
end
