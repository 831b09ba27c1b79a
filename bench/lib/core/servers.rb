# frozen_string_literal: true

require_relative "../harness"
require_relative "../server_instance"
require_relative "../servers"

module MargayBench
  # One server of bench/core.rb: Margay from this checkout, Margay from the --baseline
  # checkout (margay-base), Puma and Iodine from bench/Gemfile, nginx with
  # bench/nginx/hello.conf; margay-w2 and nginx-w2 are the same with 2 workers.
  class CoreServer < ServerInstance
    # Iodine's single-process setting: one worker process, one thread (the setting issue 14
    # measured; more threads hand the GVL back and forth on a hello-world app).
    IODINE_SETTING = { workers: 1, threads: 1 }.freeze

    def initialize(name, opts, tmp, app:, threads: nil)
      super(name, tmp: tmp, start_timeout: opts.start_timeout, read_timeout: 2)
      @opts = opts
      @app = app
      @threads = threads
    end

    def start
      env, argv, chdir = spawn_args
      launch(env, argv, chdir: chdir)
    end

    # The command line of +name+ as the results record it (PORT, APP, TMP for the values).
    def self.command_template(name, opts)
      threads = name.start_with?("margay") ? opts.margay_threads : nil
      case name
      when "nginx" then "nginx -p TMP/ -c TMP/nginx.conf -e stderr (bench/nginx/hello.conf, __PORT__ replaced)"
      when "nginx-w2" then "nginx -p TMP/ -c TMP/nginx.conf -e stderr (bench/nginx/hello.conf, __PORT__ replaced, 2 workers)"
      else
        gemfile = gemfile(name, opts)
        [*("BUNDLE_GEMFILE=#{gemfile}" unless gemfile == "Gemfile"), *argv(name, opts, "PORT", "APP", threads)].join(" ")
      end
    end

    # The Gemfile a Ruby server runs with, relative to ROOT (the baseline's is absolute).
    def self.gemfile(name, opts)
      { "margay-base" => "#{opts.baseline}/Gemfile", "puma" => "bench/Gemfile", "iodine" => "bench/Gemfile" }
        .fetch(name, "Gemfile")
    end

    # The argv of a Ruby server of core.rb.
    def self.argv(name, opts, port, app, threads)
      case name
      when "margay" then Servers.margay(port, app, exe: opts.margay_exe, threads: threads)
      when "margay-w2" then Servers.margay(port, app, exe: opts.margay_exe, workers: 2, threads: threads)
      when "margay-base" then Servers.margay(port, app, exe: File.join(opts.baseline, "exe", "margay"), threads: threads)
      when "puma" then Servers.puma(port, app, threads: threads)
      when "iodine" then Servers.iodine(port, app, **IODINE_SETTING)
      else raise ArgumentError, name
      end
    end

    private

    # [env, argv, chdir]; the rackup file is relative to ROOT for every Ruby server, so
    # margay and margay-base serve the same app.
    def spawn_args
      env = Env.clean
      case @name
      when "nginx", "nginx-w2"
        argv, prefix = Servers.nginx(@port, workers: @name == "nginx" ? 1 : 2, tmp: @tmp, nginx: Env.which("nginx"))
        [env, argv, prefix]
      else
        gemfile = File.expand_path(self.class.gemfile(@name, @opts), ROOT)
        [env.merge("BUNDLE_GEMFILE" => gemfile), self.class.argv(@name, @opts, @port, @app, @threads), ROOT]
      end
    end
  end

  # bench/core.rb's prerequisites, checked without installing anything.
  module CorePrereqs
    module_function

    def check(opts)
      problems = []
      hello = opts.scenarios.include?("hello")
      problems << "wrk not found: install it, e.g. `sudo apt-get install wrk` (Debian/Ubuntu)" if hello && !Env.which("wrk")
      if (opts.servers & %w[nginx nginx-w2]).any? && hello && !Env.which("nginx")
        problems << "nginx not found: `sudo apt-get install nginx-light` (or nginx), or leave it out with --servers margay,puma"
      end
      if opts.ruby_servers.any? && !Env.which("bundle")
        problems << "bundler not found: `sudo apt-get install ruby-bundler` or `gem install bundler`"
      end
      if opts.servers.include?("puma") && Env.which("bundle") && !Prereqs.bundled?(File.join(BENCH, "Gemfile"))
        problems << "the bench bundle (Puma) is not installed: `bundle install --gemfile bench/Gemfile`"
      end
      if opts.servers.include?("iodine") && Env.which("bundle") && !Prereqs.bundled?(File.join(BENCH, "Gemfile"))
        problems << "the bench bundle (Iodine) is not installed: `bundle install --gemfile bench/Gemfile`"
      end
      problems.concat(Prereqs.margay(ROOT, opts.margay_exe)) if (opts.servers & %w[margay margay-w2]).any?
      problems.concat(baseline(opts.baseline)) if opts.servers.include?("margay-base")
      problems
    end

    def baseline(dir)
      return ["--baseline #{dir} is not a directory"] unless File.directory?(dir)

      problems = Prereqs.margay(dir, "exe/margay", "baseline #{dir}: ")
      if Env.which("bundle") && !Prereqs.bundled?(File.join(dir, "Gemfile"))
        problems << "baseline #{dir}: its bundle is not installed: `cd #{dir} && bundle install`"
      end
      problems
    end
  end
end
