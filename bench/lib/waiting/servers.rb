# frozen_string_literal: true

require "tmpdir"
require_relative "../machine"
require_relative "../server_instance"
require_relative "../servers"

module MargayBench
  # The servers of bench/waiting.rb (issue 13) and how each is started with W workers
  # (W = 1: a single process where the server has one). Margay runs from --margay-dir
  # (default: this checkout) with bench/Gemfile's gems, so every server loads the same gems
  # and the Rails app finds pg; exe/margay puts its own lib/ first on the load path.
  module WaitingServers
    ALL = %w[margay margay-base margay-t128 margay-fibers puma falcon itsi].freeze
    # Servers that run requests in fibers: the Rails app gets isolation_level :fiber there.
    FIBER = %w[margay-fibers falcon itsi].freeze
    GEM = { "puma" => "puma", "falcon" => "falcon", "itsi" => "itsi-server" }.freeze
    WHAT = {
      "margay" => "Margay, default threads (0:5)",
      "margay-base" => "Margay from --baseline DIR (an earlier commit), default threads (0:5)",
      "margay-t128" => "Margay `-t 128:128`",
      "margay-fibers" => "Margay `--fibers` (fiber scheduler on the engine's loop)",
      "puma" => "Puma 8, default threads (0:5)",
      "falcon" => "Falcon (a fiber per request, async/io-event), `--forked -n W`",
      "itsi" => "Itsi fiber scheduler mode (`-f`: Itsi::Scheduler), 1 thread per worker, request backlog 4096"
    }.freeze

    module_function

    # [argv, extra env] to start +name+ on +port+ with rackup file +app+ and +workers+ W.
    def command(name, port:, app:, workers:, margay_dir:, tmp: Dir.tmpdir)
      argv = case name
             when "margay", "margay-base", "margay-t128", "margay-fibers"
               extra = { "margay-t128" => %w[-t 128:128], "margay-fibers" => %w[--fibers] }.fetch(name, [])
               # -w 0: single mode (one process); W > 1: cluster mode, app preloaded (Margay's default).
               Servers.margay(port, app, exe: File.join(margay_dir, "exe", "margay"), workers: workers == 1 ? 0 : workers,
                                         extra: ["--no-config", *extra])
             when "puma" then Servers.puma(port, app, **(workers == 1 ? {} : { workers: workers, extra: %w[--preload] }))
             when "falcon" then Servers.falcon(port, app, processes: workers)
             when "itsi" then Servers.itsi(port, app, workers: workers, conf: File.join(tmp, "itsi.rb"))
             else raise ArgumentError, "no command for #{name}"
             end
      [argv, {}]
    end

    # Why +name+ cannot run here (nil: it can): a peer missing from bench/Gemfile.lock, a
    # Margay tree without fiber mode, margay-base without --baseline.
    def unavailable(name, lock_text, margay_dir, margay_help)
      if name == "margay-base" && margay_dir.nil?
        "margay-base runs the tree of --baseline DIR, and none was given"
      elsif GEM[name] && Machine.locked(lock_text, GEM[name]).nil?
        "#{GEM[name]} is not in bench/Gemfile.lock"
      elsif name == "margay-fibers" && !margay_help.to_s.include?("--fibers")
        "the Margay at #{margay_dir} has no --fibers (issue 13's fiber mode is not in that tree; " \
          "point --margay-dir at a tree that has it)"
      end
    end

    # A running server of bench/waiting.rb.
    class Instance < ServerInstance
      def initialize(name, app:, path:, tmp:, env:, workers:, margay_dir:, start_timeout: 60)
        super(name, tmp: tmp, path: path, start_timeout: start_timeout, read_timeout: 15)
        @app = app
        @env = env
        @workers = workers
        @margay_dir = margay_dir
      end

      def start
        argv, extra = WaitingServers.command(@name, port: @port, app: @app, workers: @workers, margay_dir: @margay_dir,
                                                    tmp: @tmp)
        # Itsi writes .itsi.pid into its working directory: the tmp dir, not the checkout.
        launch(@env.merge(extra), argv, chdir: @name == "itsi" ? @tmp : ROOT)
      end
    end
  end
end
