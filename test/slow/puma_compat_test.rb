# frozen_string_literal: true

require_relative "support/side_by_side"
require "open3"

# Puma and Margay side by side: the same flags and config files given to
# `bundle exec puma` and `bundle exec margay` (both from bench/Gemfile, Puma
# 8.0.2), compared on what a user sees: the sockets they listen on, threads,
# workers, hooks with the process each runs in, what each signal does, what
# `pumactl stats` returns, which flags start, and exit statuses. Puma's side is
# observed live in the same run, so a Puma upgrade that changes behaviour shows.
#
# Each case is one test; the two servers of a case run at the same time, and
# cases run two at a time (parallelize_me!). A failure prints both servers'
# observations and the tail of their output.
class PumaCompatTest < Minitest::Test
  include SideBySide
  include SideBySide::Case
  parallelize_me!

  LOCAL = ["-b", "tcp://127.0.0.1:0"].freeze

  def start(server, args, dir:, env: {})
    run = Run.new(server, args, dir: dir, env: env).start
    @runs << run
    run
  end

  # Where Margay differs from Puma on purpose (docs/CONFIGURATION.md and
  # docs/SIGNALS.md say why): both sides must still be what is recorded here,
  # so a change on either side shows.
  REFUSED = { puma: "exit 1", margay: "exit 64",
              why: "a refused start exits 64 (EX_USAGE), so a process manager can tell a config mistake from a crash" }.freeze
  TERM_EXIT = lambda do |puma_exit|
    { puma: { "request in flight" => 200, "exit" => puma_exit, "serves afterwards (same pid)" => false },
      margay: { "request in flight" => 200, "exit" => "exit 0", "serves afterwards (same pid)" => false },
      why: "after a graceful stop Margay exits 0 instead of re-raising SIGTERM" }
  end
  DIFFERENCES = {
    "exit status for unknown flag" => REFUSED,
    "exit status for config with a syntax error" => REFUSED,
    "exit status for config naming an unknown directive" => REFUSED,
    "exit status for config that raises" => REFUSED,
    "exit status for missing config file" => REFUSED,
    "exit status for missing rackup file" => REFUSED,
    "exit status for port in use" => REFUSED,
    "SIGTERM in single mode" => TERM_EXIT.call("killed by SIGTERM"),
    "SIGTERM in cluster -w 2 mode" => TERM_EXIT.call("killed by SIGTERM"),
    "SIGHUP in cluster -w 2 mode" => {
      puma: { "request in flight" => 200, "exit" => "exit 0", "serves afterwards (same pid)" => false },
      margay: { "request in flight" => 200, "exit" => nil, "serves afterwards (same pid)" => true },
      why: "HUP never stops a cluster (a closed terminal should not take it down); the app's HUP handler runs in each worker"
    }
  }.freeze

  def ipv6_loopback?
    Socket.ip_address_list.any? { |a| a.ipv6? && a.ip_address == "::1" }
  end

  # ---------------------------------------------------------------------------
  # Listen addresses: which sockets (family, host; unix path and file mode;
  # backlog where asked) each bind form opens. Ports are not compared: every
  # case binds port 0.
  LISTEN_CASES = {
    "-p 0 (Puma: [::] dual stack)" => { args: %w[-p 0] },
    "-b tcp://127.0.0.1:0" => { args: %w[-b tcp://127.0.0.1:0] },
    "-b tcp://0.0.0.0:0" => { args: %w[-b tcp://0.0.0.0:0] },
    "-b tcp://[::1]:0" => { args: %w[-b tcp://[::1]:0], ipv6: true },
    "-b tcp://localhost:0 (every address localhost resolves to)" => { args: %w[-b tcp://localhost:0] },
    "-b tcp://127.0.0.1:0?backlog=2048" => { args: %w[-b tcp://127.0.0.1:0?backlog=2048], backlog: true },
    "-b unix://DIR/app.sock (Puma: umask 0, mode 0777)" => { args: %w[-b unix://DIR/app.sock] },
    "-b unix://DIR/app.sock?umask=0111" => { args: %w[-b unix://DIR/app.sock?umask=0111] },
    "-b unix://DIR/app.sock?mode=0600" => { args: %w[-b unix://DIR/app.sock?mode=0600] },
    "config: port 0" => { config: "port 0\n" },
    "config: bind and port" => { config: "bind 'tcp://127.0.0.1:0'\nport 0, '0.0.0.0'\n" },
    "config bind unix, CLI -b tcp (CLI binds replace the file's)" => {
      config: "bind 'unix://DIR/cfg.sock'\n", args: %w[-b tcp://127.0.0.1:0]
    }
  }.freeze

  LISTEN_CASES.each_with_index do |(name, spec), i|
    define_method(:"test_listen_#{i}_#{name.gsub(/\W+/, '_')}") do
      skip "no IPv6 loopback here" if spec[:ipv6] && !ipv6_loopback?
      observed = side_by_side do |server, dir|
        args = (spec[:args] || []).map { |a| a.gsub("DIR", dir) }
        if spec[:config]
          File.write(File.join(dir, "listen.rb"), spec[:config].gsub("DIR", dir))
          args = ["-C", "listen.rb", *args]
        end
        run = start(server, args, dir: dir)
        found = run.wait_serving(timeout: 30)
        seen = found&.map do |l|
          if l.family == "unix"
            mode = File.stat(l.path).mode & 0o777
            "unix #{l.path.delete_prefix("#{dir}/")} mode #{format('%04o', mode)} " \
              "#{SideBySide.get(l, '/').first}"
          else
            [l.to_s, (SideBySide.backlog(l) if spec[:backlog]), SideBySide.get(l, "/").first].compact.join(" ")
          end
        end
        seen ||= "did not serve: #{run.exited? ? run.status.inspect : 'no listener'}"
        run.stop
        { seen: seen, output: run.output }
      end
      assert_same observed, "listeners for #{name}"
    end
  end

  # ---------------------------------------------------------------------------
  # Thread counts as the banner reports them (the values, not the wording).
  THREAD_CASES = {
    "default" => { args: [] },
    "-t 2:7" => { args: %w[-t 2:7] },
    "-t 4" => { args: %w[-t 4] },
    "config threads 1, 3" => { config: "threads 1, 3\n" },
    "MAX_THREADS=9" => { env: { "MAX_THREADS" => "9" } },
    "PUMA_MIN_THREADS=2 PUMA_MAX_THREADS=3" => { env: { "PUMA_MIN_THREADS" => "2", "PUMA_MAX_THREADS" => "3" } },
    "-t 2:7 over config threads 1, 3" => { config: "threads 1, 3\n", args: %w[-t 2:7] },
    "config/puma.rb read without -C" => { files: { "config/puma.rb" => "threads 1, 3\n" } },
    "-e production: config/puma/production.rb before config/puma.rb" => {
      files: { "config/puma.rb" => "threads 1, 3\n", "config/puma/production.rb" => "threads 2, 2\n" },
      args: %w[-e production]
    }
  }.freeze

  def self.threads_in(output) = SideBySide.threads_in(output)

  THREAD_CASES.each_with_index do |(name, spec), i|
    define_method(:"test_threads_#{i}_#{name.gsub(/\W+/, '_')}") do
      observed = side_by_side do |server, dir|
        args = [*spec[:args], *LOCAL]
        (spec[:files] || {}).each do |path, source|
          FileUtils.mkdir_p(File.dirname(File.join(dir, path)))
          File.write(File.join(dir, path), source)
        end
        if spec[:config]
          File.write(File.join(dir, "threads.rb"), spec[:config])
          args = ["-C", "threads.rb", *args]
        end
        run = start(server, args, dir: dir, env: spec[:env] || {})
        served = run.wait_serving(timeout: 30)
        seen = served ? self.class.threads_in(run.output) : "did not serve: #{run.status.inspect}"
        run.stop
        { seen: seen, output: run.output }
      end
      assert_same observed, "min:max threads for #{name}"
    end
  end

  # ---------------------------------------------------------------------------
  # Worker processes: how many children the server forks for each way of
  # asking (counted in /proc once the count is stable).
  WORKER_CASES = {
    "-w 2" => { args: %w[-w 2] },
    "WEB_CONCURRENCY=2" => { env: { "WEB_CONCURRENCY" => "2" } },
    "config workers 2" => { config: "workers 2\n" },
    "config workers '2' (a String, as ENV.fetch gives)" => { config: "workers '2'\n" },
    "-w 0 over config workers 2" => { config: "workers 2\n", args: %w[-w 0] }
  }.freeze

  WORKER_CASES.each_with_index do |(name, spec), i|
    define_method(:"test_workers_#{i}_#{name.gsub(/\W+/, '_')}") do
      observed = side_by_side do |server, dir|
        args = [*spec[:args], *LOCAL]
        if spec[:config]
          File.write(File.join(dir, "workers.rb"), spec[:config])
          args = ["-C", "workers.rb", *args]
        end
        run = start(server, args, dir: dir, env: spec[:env] || {})
        seen = run.wait_serving(timeout: 30) ? "#{run.stable_children} worker processes" : "did not serve: #{run.status.inspect}"
        run.stop
        { seen: seen, output: run.output }
      end
      assert_same observed, "workers for #{name}"
    end
  end

  # ---------------------------------------------------------------------------
  # Hooks: a config whose hooks append "NAME PID PPID" to a file; the sequence
  # with pids turned into roles (master: the server process; worker: its child).
  HOOKS = %w[before_fork before_worker_fork after_worker_fork before_worker_boot before_worker_shutdown
             after_worker_shutdown after_booted after_stopped before_restart].freeze
  # The names Puma 5-7 used (Puma 8 still takes them, with a deprecation line).
  OLD_HOOKS = { "on_worker_fork" => "before_worker_fork", "on_worker_boot" => "before_worker_boot",
                "on_worker_shutdown" => "before_worker_shutdown", "on_booted" => "after_booted",
                "on_stopped" => "after_stopped", "on_restart" => "before_restart" }.freeze

  def self.hook_config(names)
    lines = names.map { |dsl, label| "#{dsl} { note.call(#{(label || dsl).inspect}) }" }
    <<~RUBY
      note = lambda do |name|
        File.open(ENV.fetch("HOOK_LOG"), "a") { |f| f.puts "\#{name} \#{Process.pid} \#{Process.ppid}" }
      end
      #{lines.join("\n")}
    RUBY
  end

  HOOK_CASES = {
    "-w 1, TERM: exact order" => { names: HOOKS, args: %w[-w 1] },
    "-w 2, TERM: each hook's count per role" => { names: HOOKS, args: %w[-w 2], tally: true },
    "single mode, TERM: exact order" => { names: HOOKS, args: [] },
    "-w 1, Puma 5-7 names, TERM: exact order" => {
      names: HOOKS.map { |h| [OLD_HOOKS.key(h) || h, h] }, args: %w[-w 1]
    },
    "-w 1, USR2 then TERM: exact order" => { names: HOOKS, args: %w[-w 1], restart: true }
  }.freeze

  def hook_roles(run, log)
    return [] unless File.exist?(log)

    File.readlines(log).map do |line|
      name, pid, ppid = line.split
      role = if Integer(pid) == run.pid then "master"
             elsif Integer(ppid) == run.pid then "worker"
             else "other process"
             end
      "#{name} in #{role}"
    end.then { |roles| fork_pairs_in_one_order(roles) }
  end

  # Puma runs after_worker_fork in the master and before_worker_boot in the new worker right
  # after the fork, with nothing ordering the two processes: its log shows either first. Margay
  # runs the master's first (Cluster::ForkGate). Where the two stand side by side they are
  # compared as one step.
  FORK_PAIR = ["after_worker_fork in master", "before_worker_boot in worker"].freeze

  # Each pair is taken once, left to right: a line that ends one pair never starts the next.
  def fork_pairs_in_one_order(roles)
    roles = roles.dup
    i = 0
    while i < roles.size - 1
      if roles[i, 2].sort == FORK_PAIR.sort
        roles[i, 2] = FORK_PAIR
        i += 2
      else
        i += 1
      end
    end
    roles
  end

  HOOK_CASES.each_with_index do |(name, spec), i|
    define_method(:"test_hooks_#{i}_#{name.gsub(/\W+/, '_')}") do
      observed = side_by_side do |server, dir|
        log = File.join(dir, "hooks.log")
        File.write(File.join(dir, "hooks.rb"), self.class.hook_config(spec[:names]))
        run = start(server, ["-C", "hooks.rb", *spec[:args], *LOCAL], dir: dir, env: { "HOOK_LOG" => log })
        listener = run.wait_serving(timeout: 30)&.first
        workers = spec[:args].include?("-w") ? Integer(spec[:args].last) : 0
        if listener
          settle_hooks(run, log, workers)
          if spec[:restart]
            booted = hook_roles(run, log).count { |r| r.start_with?("after_booted") }
            Process.kill("USR2", run.pid)
            settle_hooks(run, log, workers, booted: booted + 1, timeout: 20)
          end
        end
        run.stop # how TERM ends the process is the signal cases' business; here only the hooks
        seen = hook_roles(run, log)
        seen = seen.tally.sort.to_h if spec[:tally]
        { seen: seen, output: run.output }
      end
      assert_same observed, "hooks (#{name})"
    end
  end

  # Wait until the boot hooks ran: +booted+ after_booted lines, or (for a
  # server that never runs after_booted) every worker's boot hook and 2 s more.
  def settle_hooks(run, log, workers, booted: 1, timeout: 15)
    deadline = Margay::Clock.now + timeout
    workers_seen_at = nil
    until Margay::Clock.now > deadline || run.exited?
      roles = hook_roles(run, log)
      return if roles.count { |r| r.start_with?("after_booted") } >= booted
      if roles.count { |r| r.start_with?("before_worker_boot") } >= workers * booted
        workers_seen_at ||= Margay::Clock.now
        return if Margay::Clock.now - workers_seen_at > 2
      end
      sleep 0.1
    end
  end

  # ---------------------------------------------------------------------------
  # Signals: a request in flight (/slow, 2 s) when the signal arrives. What
  # happens to that request, whether the process exits (and how), and whether
  # it serves again afterwards (same master pid).
  SIGNALS = %w[TERM INT USR1 USR2 HUP].freeze
  MODES = { "single" => [], "cluster -w 2" => %w[-w 2] }.freeze

  def describe_status(status)
    return nil unless status

    status.signaled? ? "killed by SIG#{Signal.signame(status.termsig)}" : "exit #{status.exitstatus}"
  end

  # After the request in flight is answered: [exit status, serving?]. Serving
  # means answering / again, twice, 2 s apart, without having exited (a
  # graceful stop has closed its listener by then; a restart answers once back).
  def outcome_after_signal(run, listener, timeout: 12)
    deadline = Margay::Clock.now + timeout
    first_ok = nil
    until Margay::Clock.now > deadline
      return [run.status, false] if run.exited?

      if SideBySide.get(listener, "/", timeout: 5).first == 200
        first_ok ||= Margay::Clock.now
        return [nil, true] if Margay::Clock.now - first_ok >= 2
      end
      sleep 0.2
    end
    [run.exited?, false]
  end

  MODES.each do |mode, mode_args|
    SIGNALS.each do |signal|
      define_method(:"test_signal_#{signal}_#{mode.gsub(/\W+/, '_')}") do
        observed = side_by_side do |server, dir|
          run = start(server, [*mode_args, *LOCAL], dir: dir, env: { "SLOW_SECONDS" => "2" })
          listener = run.wait_serving(timeout: 30)&.first
          next { seen: "did not serve: #{run.status.inspect}", output: run.output } unless listener

          run.stable_children(timeout: 10) unless mode_args.empty?
          slow = Thread.new { SideBySide.get(listener, "/slow", timeout: 20) }
          next { seen: "/slow did not start", output: run.output } unless run.wait_for(/slow request started/, timeout: 15)

          Process.kill(signal, run.pid)
          in_flight = slow.value.first
          exited, serving = outcome_after_signal(run, listener)
          alive = run.alive?
          run.stop
          { seen: { "request in flight" => in_flight, "exit" => describe_status(exited || nil),
                    "serves afterwards (same pid)" => serving && alive },
            output: run.output }
        end
        assert_same observed, "SIG#{signal} in #{mode} mode"
      end
    end
  end

  # HUP when stdout is redirected by the server (--redirect-stdout): Puma then
  # reopens its log files and keeps serving (without the redirect it stops).
  { "single" => [], "cluster -w 2" => %w[-w 2] }.each do |mode, mode_args|
    define_method(:"test_signal_HUP_with_redirect_stdout_#{mode.gsub(/\W+/, '_')}") do
      observed = side_by_side do |server, dir|
        out = File.join(dir, "out.log")
        run = start(server, [*mode_args, *LOCAL, "--redirect-stdout", out, "--redirect-stderr", File.join(dir, "err.log")],
                    dir: dir, env: { "SLOW_SECONDS" => "2" })
        listener = run.wait_serving(timeout: 30)&.first
        next { seen: "did not serve: #{run.status.inspect}", output: run.output } unless listener

        run.stable_children(timeout: 10) unless mode_args.empty?
        slow = Thread.new { SideBySide.get(listener, "/slow", timeout: 20) }
        deadline = Margay::Clock.now + 15
        sleep 0.05 until (File.exist?(out) && File.read(out).include?("slow request started")) || Margay::Clock.now > deadline
        Process.kill("HUP", run.pid)
        in_flight = slow.value.first
        exited, serving = outcome_after_signal(run, listener)
        alive = run.alive?
        run.stop
        { seen: { "request in flight" => in_flight, "exit" => describe_status(exited || nil),
                  "serves afterwards (same pid)" => serving && alive, "log file written" => File.exist?(out) },
          output: "#{run.output}--- out.log\n#{File.exist?(out) ? File.read(out) : '(none)'}" }
      end
      assert_same observed, "SIGHUP with --redirect-stdout in #{mode} mode"
    end
  end

  # ---------------------------------------------------------------------------
  # The real pumactl against each server's control app: the keys of `stats`
  # (every key Puma's has, Margay's must have), a wrong token refused, `stop`.
  def pumactl(dir, *args)
    out, status = Open3.capture2e(SideBySide.child_env, "bundle", "exec", "pumactl", *args, chdir: dir,
                                                                           unsetenv_others: true)
    [out, status.exitstatus]
  end

  { "single" => [], "cluster -w 2" => %w[-w 2] }.each do |mode, mode_args|
    define_method(:"test_pumactl_#{mode.gsub(/\W+/, '_')}") do
      observed = side_by_side do |server, dir|
        url = "unix://#{dir}/ctl.sock"
        run = start(server, [*mode_args, *LOCAL, "--control-url", url, "--control-token", "sekrit",
                             "-S", "#{dir}/server.state"], dir: dir)
        next { seen: "did not serve: #{run.status.inspect}", output: run.output } unless run.wait_serving(timeout: 30)

        run.stable_children(timeout: 10) unless mode_args.empty?
        out, code = pumactl(dir, "-C", url, "-T", "sekrit", "stats")
        json = out.lines.find { |l| l.start_with?("{") }
        keys = json ? SideBySide.key_paths(JSON.parse(json)) : "no JSON (exit #{code}): #{out.lines.last(2).join}"
        _, bad_token = pumactl(dir, "-C", url, "-T", "wrong", "stats")
        state_out, state_code = pumactl(dir, "-S", "#{dir}/server.state", "stats")
        _, stop_code = pumactl(dir, "-C", url, "-T", "sekrit", "stop")
        exited = run.wait_exit(timeout: 20)
        run.stop
        { seen: { "stats keys" => keys, "wrong token exit" => bad_token,
                  "pumactl -S state stats" => [state_code, state_out.include?("{")],
                  "stop exit" => stop_code, "server after stop" => describe_status(exited) },
          output: run.output }
      end
      puma = observed[:puma][:seen]
      margay = observed[:margay][:seen]
      if puma["stats keys"].is_a?(Array) && margay["stats keys"].is_a?(Array)
        missing = puma["stats keys"] - margay["stats keys"]
        assert_empty missing, "`pumactl stats` keys Puma has and Margay lacks (#{mode})"
        [puma, margay].each { |seen| seen.delete("stats keys") }
      end
      assert_same observed, "pumactl (#{mode})"
    end
  end

  # ---------------------------------------------------------------------------
  # Every Puma 8 CLI flag: does the server start and serve with it (or, for
  # -V, how does it exit)? From an empty directory where the flag needs one.
  FLAG_CASES = {
    "-v (Puma 8: --log-requests)" => %w[-v],
    "-q" => %w[-q],
    "-s / --silent" => %w[-s],
    "-V / --version (exits)" => %w[-V],
    "--debug" => %w[--debug],
    "--early-hints" => %w[--early-hints],
    "--no-config" => %w[--no-config],
    "--idle-timeout 30" => %w[--idle-timeout 30],
    "--tag app" => %w[--tag app],
    "-I lib" => %w[-I lib],
    "--preload -w 2" => %w[--preload -w 2],
    "--prune-bundler -w 2" => %w[--prune-bundler -w 2],
    "-f (fork_worker) -w 2" => %w[-f -w 2],
    "-R 'true' (restart command)" => ["-R", "true"],
    "--plugin tmp_restart" => %w[--plugin tmp_restart],
    "--bind-to-activated-sockets" => %w[--bind-to-activated-sockets],
    "--extra-runtime-dependencies rack" => %w[--extra-runtime-dependencies rack],
    "--redirect-stdout/--redirect-stderr/--redirect-append" =>
      %w[--redirect-stdout DIR/out.log --redirect-stderr DIR/err.log --redirect-append],
    "-S DIR/state" => %w[-S DIR/server.state],
    "--control-url/--control-token" => %w[--control-url unix://DIR/ctl.sock --control-token t],
    "--dir DIR (run from elsewhere)" => %w[--dir DIR],
    "-e production" => %w[-e production],
    "--pidfile DIR/server.pid" => %w[--pidfile DIR/server.pid]
  }.freeze

  FLAG_CASES.each_with_index do |(name, flag_args), i|
    define_method(:"test_flag_#{i}_#{name.gsub(/\W+/, '_')}") do
      observed = side_by_side do |server, dir|
        args = flag_args.map { |a| a.gsub("DIR", dir) }
        args += LOCAL unless flag_args == %w[-V]
        cwd = flag_args.include?("--dir") ? Dir.mktmpdir("margay-compat-cwd-").tap { |d| @dirs << d } : dir
        run = start(server, args, dir: cwd)
        seen = run.wait_serving(timeout: 30) ? "serves" : describe_status(run.status) || "neither serves nor exits"
        run.stop
        { seen: seen, output: run.output }
      end
      assert_same observed, "the flag #{name}"
    end
  end

  # ---------------------------------------------------------------------------
  # Through Rails and rackup: `bin/rails server -u SERVER` in a minimal Rails 7.2
  # app carrying the generated config/puma.rb (RAILS_MAX_THREADS=4, PORT set), and
  # `rackup -s SERVER -p 0`. Puma's handler reads config/puma.rb; the listeners,
  # threads and the port must be the same under Margay.
  RAILS_FILES = {
    "bin/rails" => <<~'RUBY',
      APP_PATH = File.expand_path("../config/application", __dir__)
      require_relative "../config/boot"
      require "rails/commands"
    RUBY
    "config/boot.rb" => %(require "bundler/setup"\n),
    "config/application.rb" => <<~'RUBY',
      require_relative "boot"
      require "rails"
      require "action_controller/railtie"
      class CompatApp < Rails::Application
        config.load_defaults 7.2
        config.eager_load = false
        config.secret_key_base = "0" * 64
        config.hosts.clear
        config.logger = Logger.new($stdout)
      end
    RUBY
    "config/environment.rb" => %(require_relative "application"\nRails.application.initialize!\n),
    "config/routes.rb" => %(Rails.application.routes.draw { root to: proc { [200, {}, ["ok"]] } }\n),
    "config.ru" => %(require_relative "config/environment"\nrun Rails.application\n)
  }.freeze

  def test_rails_server_with_the_generated_config
    observed = side_by_side do |server, dir|
      RAILS_FILES.each do |path, source|
        FileUtils.mkdir_p(File.dirname(File.join(dir, path)))
        File.write(File.join(dir, path), source)
      end
      FileUtils.mkdir_p(File.join(dir, "tmp/pids"))
      FileUtils.cp(File.expand_path("../fixtures/puma_configs/rails_7_2.rb", __dir__), File.join(dir, "config/puma.rb"))
      my_port = TCPServer.new("127.0.0.1", 0).then { |s| s.addr[1].tap { s.close } }
      run = start_command(server, dir, ["bundle", "exec", "ruby", "bin/rails", "server", "-u", server.to_s],
                          env: { "PORT" => my_port.to_s, "RAILS_MAX_THREADS" => "4" })
      found = run.wait_serving(timeout: 60)
      seen = if found
               { "listeners" => found.map(&:to_s), "on PORT" => found.map(&:port).uniq == [my_port],
                 "threads" => self.class.threads_in(run.output) }
             else
               "did not serve: #{run.status.inspect}"
             end
      run.stop
      { seen: seen, output: run.output }
    end
    assert_same observed, "bin/rails server -u SERVER with Rails 7.2's config/puma.rb"
  end

  def test_rackup_handler
    observed = side_by_side do |server, dir|
      run = start_command(server, dir, ["bundle", "exec", "rackup", "-s", server.to_s, "-p", "0"])
      found = run.wait_serving(timeout: 30)
      seen = found ? { "listeners" => found.map(&:to_s), "threads" => self.class.threads_in(run.output) } : "did not serve: #{run.status.inspect}"
      run.stop
      { seen: seen, output: run.output }
    end
    assert_same observed, "rackup -s SERVER -p 0"
  end

  def start_command(server, dir, command, env: {})
    run = Run.new(server, [], dir: dir, env: env, command: command).start
    @runs << run
    run
  end

  # ---------------------------------------------------------------------------
  # Refused starts: the exit status a process manager sees.
  REFUSALS = {
    "unknown flag" => { args: %w[--no-such-flag] },
    "config with a syntax error" => { config: "threads 1,\n  end end\n" },
    "config naming an unknown directive" => { config: "no_such_directive 3\n" },
    "config that raises" => { config: "raise 'boom from the config'\n" },
    "missing config file" => { args: %w[-C nope.rb] },
    "missing rackup file" => { args: %w[missing.ru] },
    "rackup that raises" => { rackup: "raise 'boom from the rackup'\n" },
    "port in use" => { in_use: true }
  }.freeze

  REFUSALS.each_with_index do |(name, spec), i|
    define_method(:"test_refused_#{i}_#{name.gsub(/\W+/, '_')}") do
      blocker = TCPServer.new("127.0.0.1", 0) if spec[:in_use]
      observed = side_by_side do |server, dir|
        args = [*spec[:args]]
        args = ["-b", spec[:in_use] ? "tcp://127.0.0.1:#{blocker.addr[1]}" : LOCAL.last, *args]
        if spec[:config]
          File.write(File.join(dir, "bad.rb"), spec[:config])
          args.unshift("-C", "bad.rb")
        end
        if spec[:rackup]
          File.write(File.join(dir, "bad.ru"), spec[:rackup])
          args << "bad.ru"
        end
        status, output = SideBySide.run_to_exit(server, args, dir: dir, timeout: 20)
        { seen: describe_status(status) || "still running after 20 s", output: output }
      end
      assert_same observed, "exit status for #{name}"
    ensure
      blocker&.close
    end
  end
end
