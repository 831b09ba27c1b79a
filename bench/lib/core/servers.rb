# frozen_string_literal: true

require "fileutils"
require_relative "../harness"
require_relative "../server_instance"

module MargayBench
  # One server of bench/core.rb: Margay from this checkout, Margay from the --baseline
  # checkout (margay-base), Puma and Iodine from bench/Gemfile, nginx with
  # bench/nginx/hello.conf; margay-w2 and nginx-w2 are the same with 2 workers.
  class CoreServer < ServerInstance
    # Iodine's single-process setting: one worker process, one thread (the setting issue 14
    # measured; more threads hand the GVL back and forth on a hello-world app).
    IODINE_SETTING = "-t 1 -w 1"

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
      threads = opts.margay_threads ? "-t #{opts.margay_threads} " : ""
      case name
      when "margay" then "bundle exec #{opts.margay_exe} -b tcp://127.0.0.1:PORT -e production -q #{threads}APP"
      when "margay-base"
        "BUNDLE_GEMFILE=#{opts.baseline}/Gemfile bundle exec #{opts.baseline}/exe/margay -b tcp://127.0.0.1:PORT " \
          "-e production -q #{threads}APP"
      when "margay-w2" then "bundle exec #{opts.margay_exe} -b tcp://127.0.0.1:PORT -e production -q #{threads}-w 2 APP"
      when "puma" then "BUNDLE_GEMFILE=bench/Gemfile bundle exec puma -b tcp://127.0.0.1:PORT -e production -C - -q APP"
      when "iodine" then "BUNDLE_GEMFILE=bench/Gemfile bundle exec iodine -b 127.0.0.1 -p PORT #{IODINE_SETTING} APP"
      when "nginx" then "nginx -p TMP/ -c TMP/nginx.conf -e stderr (bench/nginx/hello.conf, __PORT__ replaced)"
      when "nginx-w2" then "nginx -p TMP/ -c TMP/nginx.conf -e stderr (bench/nginx/hello.conf, __PORT__ replaced, 2 workers)"
      end
    end

    private

    # [env, argv, chdir]; the rackup file is relative to ROOT for every Ruby server, so
    # margay and margay-base serve the same app.
    def spawn_args
      env = Env.clean
      case @name
      when "margay" then [env.merge("BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile")), margay_argv(@opts.margay_exe), ROOT]
      when "margay-w2"
        argv = margay_argv(@opts.margay_exe)
        [env.merge("BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile")), argv.insert(-2, "-w", "2"), ROOT]
      when "iodine"
        argv = %W[bundle exec iodine -b 127.0.0.1 -p #{@port}] + IODINE_SETTING.split << @app
        [env.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile")), argv, ROOT]
      when "margay-base"
        base = @opts.baseline
        [env.merge("BUNDLE_GEMFILE" => File.join(base, "Gemfile")), margay_argv(File.join(base, "exe", "margay")), ROOT]
      when "puma"
        argv = %W[bundle exec puma -b tcp://127.0.0.1:#{@port} -e production -C - -q]
        argv += ["-t", @threads] if @threads
        [env.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile")), argv << @app, ROOT]
      when "nginx" then nginx_args(env, 1)
      when "nginx-w2" then nginx_args(env, 2)
      else raise ArgumentError, @name
      end
    end

    def margay_argv(exe)
      argv = %W[bundle exec #{exe} -b tcp://127.0.0.1:#{@port} -e production -q]
      argv += ["-t", @threads] if @threads
      argv << @app
    end

    def nginx_args(env, workers)
      prefix = File.join(@tmp, "nginx-#{@port}")
      FileUtils.mkdir_p(prefix)
      conf = File.read(File.join(BENCH, "nginx", "hello.conf")).gsub("__PORT__", @port.to_s)
                 .sub(/^worker_processes \d+;/, "worker_processes #{workers};")
      File.write(File.join(prefix, "nginx.conf"), conf)
      [env, [Env.which("nginx"), "-p", "#{prefix}/", "-c", File.join(prefix, "nginx.conf"), "-e", "stderr"], prefix]
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
