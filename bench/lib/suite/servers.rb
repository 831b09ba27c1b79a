# frozen_string_literal: true

require_relative "../machine"
require_relative "../server_instance"
require_relative "../servers"

module MargayBench
  # The servers of bench/run.rb and the one resource budget they all get.
  #
  # Budget rule (stated in docs/BENCHMARKS.md): W = number of CPUs, T = 5.
  # - servers with processes and threads (Margay, Puma, Iodine, Agoo): W workers x T threads;
  # - single-threaded forking servers (Unicorn, Pitchfork): 2W worker processes;
  # - Falcon (fibers, no thread pool): W forked processes (its default "forked" model);
  # - Margay in fiber mode and Itsi in fiber-scheduler mode (issue 13): W workers, a fiber per
  #   request (Margay's default threads; Itsi 1 thread, request backlog raised to 4096 so it
  #   does not answer 503 to what its default backlog of 30 cannot hold);
  # - Thin (one EventMachine process; `-s N` would give N servers on N ports): 1 process,
  #   --threaded with a pool of T threads.
  # Preloading the app before forking: Margay (default in cluster mode), Puma (--preload),
  # Unicorn (preload_app true); Pitchfork loads the app once in its mold and forks workers
  # from it; Iodine and Agoo load the rackup file before forking workers; Falcon loads it in
  # each forked process.
  module SuiteServers
    ALL = %w[margay margay-fibers puma unicorn pitchfork falcon itsi iodine agoo thin passenger].freeze
    GEM = { "margay" => "margay", "margay-fibers" => "margay", "puma" => "puma", "unicorn" => "unicorn",
            "pitchfork" => "pitchfork", "falcon" => "falcon", "itsi" => "itsi-server", "iodine" => "iodine",
            "agoo" => "agoo", "thin" => "thin", "passenger" => "passenger" }.freeze
    # Servers that run each request in a fiber: the Rails app isolates its state per fiber there.
    FIBER = %w[margay-fibers falcon itsi].freeze

    # Known reasons a server is not in the run on this machine (checked again at run time).
    KNOWN_UNAVAILABLE = {
      "passenger" => "passenger 6.2.1 (newest; the gem installs on Ruby 3.1) cannot start here: Passenger standalone " \
                     "needs its agent binary, which it downloads prebuilt (github.com, oss-binaries.phusionpassenger.com: " \
                     "no network here) or compiles from source; `passenger-config compile-agent --auto` stopped at " \
                     "\"Cannot find the `curl-config` command\" (needs libcurl4-openssl-dev) and the C++ build was not " \
                     "attempted within this task's time budget (the nginx engine would also need nginx sources from " \
                     "nginx.org). Left out of bench/Gemfile until it can run."
    }.freeze

    module_function

    def budget(cpus)
      w = cpus
      t = 5
      {
        "rule" => "W = CPUs (#{w}), T = #{t}: W workers x T threads where a server has both; " \
                  "Unicorn/Pitchfork 2W single-threaded workers; Falcon W forked processes; Thin 1 process x T threads",
        "margay" => "#{w} workers x #{t} threads", "puma" => "#{w} workers x #{t} threads (preload)",
        "unicorn" => "#{2 * w} workers (preload_app)", "pitchfork" => "#{2 * w} workers (mold)",
        "falcon" => "#{w} processes (forked, fibers)", "iodine" => "#{w} workers x #{t} threads",
        "margay-fibers" => "#{w} workers, --fibers (a fiber per request)",
        "itsi" => "#{w} workers x 1 thread, fiber scheduler (Itsi::Scheduler)",
        "agoo" => "#{w} workers x #{t} threads", "thin" => "1 process x #{t} threads (--threaded)",
        "w" => w, "t" => t
      }
    end

    # [argv, extra env] to start +name+ on +port+ with rackup file +app+ (relative to ROOT).
    def command(name, port:, app:, tmp:, w:, t:)
      argv = case name
             when "margay" then Servers.margay(port, app, workers: w, threads: "#{t}:#{t}")
             when "margay-fibers" then Servers.margay(port, app, workers: w, extra: %w[--fibers])
             when "itsi" then Servers.itsi(port, app, workers: w, conf: File.join(tmp, "itsi-#{port}.rb"))
             when "puma" then Servers.puma(port, app, workers: w, threads: "#{t}:#{t}", extra: %w[--preload])
             when "unicorn" then Servers.unicorn(port, app, workers: 2 * w, tmp: tmp)
             when "pitchfork" then Servers.pitchfork(port, app, workers: 2 * w, tmp: tmp)
             when "falcon" then Servers.falcon(port, app, processes: w)
             when "iodine" then Servers.iodine(port, app, workers: w, threads: t)
             when "agoo" then Servers.agoo(port, app, workers: w, threads: t)
             when "thin" then Servers.thin(port, app, threads: t)
             else raise ArgumentError, "no command for #{name}"
             end
      [argv, {}]
    end

    # Resolved versions from bench/Gemfile.lock.
    def versions(lock_text)
      ALL.to_h { |s| [s, Machine.locked(lock_text, GEM[s])] }
    end

    # A running peer of the suite, started with its command and the shared budget.
    class Instance < ServerInstance
      def initialize(name, app:, path:, tmp:, budget:, env:, start_timeout: 60)
        super(name, tmp: tmp, path: path, start_timeout: start_timeout)
        @app = app
        @budget = budget
        @env = env
      end

      def start
        argv, extra = SuiteServers.command(@name, port: @port, app: @app, tmp: @tmp, w: @budget["w"], t: @budget["t"])
        # Itsi writes .itsi.pid into its working directory: the tmp dir, not the checkout.
        launch(@env.merge(extra), argv, chdir: @name == "itsi" ? @tmp : ROOT)
      end
    end
  end
end
