# frozen_string_literal: true

require "fileutils"
require "json"
require "time"
require "tmpdir"
require_relative "procs"
require_relative "machine"
require_relative "postgres"

module MargayBench
  ARGV_COPY = ARGV.dup.freeze # the command line as given (required before the options parse it)

  # What bench/core.rb and bench/run.rb share around their measurements: the prerequisites
  # check, a tmp dir for logs, progress lines, stopping every server and load generator on
  # INT/TERM, the head of a result, and writing <prefix>-<time>.json, <prefix>-latest.json
  # and <prefix>-latest.md. A subclass measures; it keeps the servers it started in @live
  # and the pids of running load generators in @load_pid (and @slow_pid); a server that
  # failed to start is in @broken (by the subclass's key) and is not started again.
  class Harness
    # A runner script's main: parse ARGV with +options_class+ (a bad command line: one line
    # naming +script+, exit 64), then exit with what the runner's #run returns.
    def self.main(script, options_class)
      begin
        opts = options_class.new(ARGV)
      rescue OptionParser::ParseError, ArgumentError => e
        warn "#{script}: #{e.message}"
        exit 64
      end
      exit new(opts).run
    end

    # +script+: how messages name it; +tag+: the progress prefix; +width+: of its seconds.
    def initialize(opts, script:, tag:, width:)
      @o = opts
      @script = script
      @progress_format = "[#{tag} %#{width}.1fs] %s"
      @t0 = Procs.now
      @failures = []
      @live = []
      @broken = {}
    end

    private

    # Says what is missing and returns false, or makes the results and tmp dirs and traps
    # INT/TERM.
    def prepare(problems, tmp_prefix)
      unless problems.empty?
        warn "#{@script}: cannot run, missing prerequisites:"
        problems.each { |p| warn "  - #{p}" }
        return false
      end
      FileUtils.mkdir_p(@o.results_dir)
      @tmp = Dir.mktmpdir(tmp_prefix)
      trap_signals
      true
    end

    # In an ensure: stop what is left (the backends first: @backends); keep the logs when
    # something failed.
    def clean_up
      @backends&.stop
      @live.each(&:stop)
      return unless @tmp

      @failures.empty? ? FileUtils.rm_rf(@tmp) : warn("#{@script}: server logs kept in #{@tmp}")
    end

    # Starts +server+ (kept in @live); true if it answers. If not: +failure+ (what was being
    # measured) is recorded with the error (+detail+ of it), the command and the log tail,
    # +key+ is marked broken, and false.
    def start_server(server, key, failure, label, detail: :brief)
      @live << server
      server.start
      true
    rescue StandardError => e
      @broken[key] = true
      error = detail == :brief ? brief(e) : e.message
      @failures << failure.merge("error" => "start: #{error}", "command" => server.command, "log_tail" => server.log_tail)
      progress "#{label} FAILED to start: #{error}\n#{server.log_tail.gsub(/^/, '    | ')}"
      false
    end

    # Stops +server+ (one of @live); says so when it needed SIGKILL.
    def stop_server(server, label)
      how = server.stop
      @live.delete(server)
      progress "#{label} needed SIGKILL to stop" if how == :kill
    end

    def progress(msg)
      $stdout.puts format(@progress_format, Procs.now - @t0, msg)
      $stdout.flush
    end

    # An error for a log line or a result: its class and the first line of its message.
    def brief(err)
      "#{err.class}: #{err.message.lines.first.to_s.strip[0, 300]}"
    end

    # wrk's arguments: +conns+ connections (at most 2 threads) for +seconds+ against +path+
    # on +port+, with the run's --wrk-timeout.
    def wrk_argv(conns, seconds, port, path)
      Wrk.argv(threads: conns.is_a?(Integer) ? [2, conns].min : 2, connections: conns, seconds: seconds,
               timeout: @o.wrk_timeout, url: "http://127.0.0.1:#{port}#{path}")
    end

    # One bounded wrk run (a ^C stops it through @load_pid) with +env+ for its script; its
    # data, with the command that ran it (env entries with a value first, as K=V).
    def run_wrk(conns, seconds, port, path, env: {})
      argv = wrk_argv(conns, seconds, port, path)
      data, = Wrk.run(argv, out_path: File.join(@tmp, "wrk.out"), bound: seconds.ceil + @o.wrk_timeout + 30, env: env) do |pid|
        @load_pid = pid
      end
      data["command"] = env.reject { |_, v| v.empty? }.map { |k, v| "#{k}=#{v}" }.concat(argv).join(" ")
      data
    ensure
      @load_pid = nil
    end

    # ^C or TERM: stop the load generators, the servers and the backends a run started
    # (PostgreSQL, the slow service: @backends), remove the temp dir, exit 130. The handler
    # exits without running ensure blocks.
    def trap_signals
      %w[INT TERM].each do |sig|
        trap(sig) do
          Thread.new do
            [@load_pid, @slow_pid].compact.each { |pid| Procs.stop(pid, grace: 2) }
            @live.each(&:stop)
            @backends&.stop
            FileUtils.rm_rf(@tmp) if @tmp
            warn "#{@script}: interrupted, load generators, servers#{' and PostgreSQL' if @backends} stopped"
            exit!(130)
          end
        end
      end
    end

    # The environment every server and app of a run gets: the bench bundle, production, the
    # Rails app's SQLite file in the run's temp dir.
    def bench_env
      Env.clean.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile"), "RACK_ENV" => "production",
                      "RAILS_ENV" => "production", "APP_ENV" => "production",
                      "BENCH_RAILS_DB" => File.join(@tmp, "rails.sqlite3"))
    end

    # Creates and fills the Rails app's SQLite database (BENCH_RAILS_DB of #bench_env) once,
    # before any server boots it.
    def seed_rails
      progress "rails: creating the SQLite database (#{@env['BENCH_RAILS_DB']})"
      Prereqs.seed_rails(@env, "SQLite")
    end

    # The first keys of every result; the subclass says #versions and #config.
    def result_head(benchmark)
      { "schema" => 1, "benchmark" => benchmark, "mode" => @o.mode, "started_at" => Time.now.utc.iso8601,
        "argv" => ARGV_COPY, "machine" => Machine.describe, "versions" => versions, "config" => config }
    end

    # The last keys, then the files; the exit status (1: something failed).
    def finish(result, prefix)
      result["failures"] = @failures
      result["finished_at"] = Time.now.utc.iso8601
      result["elapsed_s"] = (Procs.now - @t0).round(1)
      write(result, prefix)
      @failures.empty? ? 0 : 1
    end

    def write(result, prefix)
      stamp = Time.now.utc.strftime("%Y%m%dT%H%M%SZ")
      json = JSON.pretty_generate(result)
      md = markdown(result)
      File.write(File.join(@o.results_dir, "#{prefix}-#{stamp}.json"), json)
      File.write(File.join(@o.results_dir, "#{prefix}-latest.json"), json)
      File.write(File.join(@o.results_dir, "#{prefix}-latest.md"), md)
      puts
      puts md
      progress "results: #{File.join(@o.results_dir, "#{prefix}-#{stamp}.json")} (+ #{prefix}-latest.json, #{prefix}-latest.md)"
    end

    def warn_if_loaded(noisy_pct)
      load1 = Procs.loadavg&.first
      return unless load1 && load1 > 0.5

      progress "WARNING: load average #{load1} before starting; other processes will skew the figures " \
               "(runs are flagged NOISY when others use > #{noisy_pct}% of the CPUs)"
    end
  end

  # Prerequisites both runners check, without installing anything.
  module Prereqs
    module_function

    # What keeps run.rb or waiting.rb from running: wrk, bundler, the Margay checkout at +root+
    # (built; +what+ prefixes its problems), the bench bundle, and PostgreSQL when +postgres+.
    def runner(root, what: "", postgres: false)
      problems = []
      problems << "wrk not found: `sudo apt-get install wrk`" unless Env.which("wrk")
      problems << "bundler not found: `sudo apt-get install ruby-bundler`" unless Env.which("bundle")
      problems.concat(margay(root, "exe/margay", what))
      unless bundled?(File.join(BENCH, "Gemfile"))
        problems << "the bench bundle is not installed: `bundle install --gemfile bench/Gemfile`"
      end
      pg = postgres && Postgres.missing
      problems << pg if pg
      problems
    end

    # What keeps the Margay checkout at +root+ from running +exe+ (+what+ prefixes each).
    def margay(root, exe, what = "")
      problems = []
      problems << "#{what}#{exe} is missing: Margay's executable is not in this tree yet" unless File.exist?(File.expand_path(exe, root))
      if Dir.glob(File.join(root, "lib", "margay", "margay_native.*")).empty?
        problems << "#{what}Margay's native extension is not built: `bundle install && bundle exec rake compile`"
      end
      problems
    end

    # Boots bench/apps/rails once with +env+, which creates and fills its database (on +what+,
    # for the error) before any server boots it.
    def seed_rails(env, what)
      ok = system(env, "bundle", "exec", "ruby", "-e", 'require "./bench/apps/rails/config/environment"; ' \
                                                      'puts "posts: #{Post.count}, authors: #{Author.count}"',
                  unsetenv_others: true, chdir: ROOT, in: File::NULL)
      raise "could not seed bench/apps/rails on #{what} (see above)" unless ok
    end

    def bundled?(gemfile)
      system(Env.clean.merge("BUNDLE_GEMFILE" => gemfile), "bundle", "check", unsetenv_others: true, chdir: ROOT,
                                                                               %i[out err] => File::NULL)
    end
  end
end
