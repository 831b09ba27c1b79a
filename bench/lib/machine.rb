# frozen_string_literal: true

require "etc"
require "rbconfig"
require_relative "procs"

module MargayBench
  # What a result file records about where it was measured: the machine, the output of a
  # command (versions, commits), and the versions of the tools and gems.
  module Machine
    module_function

    # CPUs, CPU model, kernel, memory, load average at start and the limits that matter
    # for many connections.
    def describe
      {
        "nproc" => Etc.nprocessors, "cpu_model" => read("/proc/cpuinfo")&.[](/^model name\s*:\s*(.*)$/, 1) || "unknown",
        "kernel" => Etc.uname[:release], "arch" => Etc.uname[:machine], "hostname" => Etc.uname[:nodename],
        "loadavg" => read("/proc/loadavg")&.split&.first(3)&.join(" "),
        "mem_total_kib" => read("/proc/meminfo")&.[](/^MemTotal:\s+(\d+)/, 1)&.to_i,
        "somaxconn" => read("/proc/sys/net/core/somaxconn")&.strip&.to_i,
        "nofile_limit" => Process.getrlimit(:NOFILE).first
      }
    end

    # The stripped output (stdout and stderr) of +argv+ run in +chdir+ with a clean
    # environment; nil when it cannot be started.
    def capture(*argv, chdir: ROOT, env: Env.clean)
      IO.popen(env, argv, chdir: chdir, unsetenv_others: true, err: %i[child out], &:read).strip
    rescue SystemCallError
      nil
    end

    def ruby_version
      capture(RbConfig.ruby, "-v")
    end

    # Margay::VERSION of the checkout at +root+.
    def margay_version(root = ROOT)
      read(File.join(root, "lib/margay/version.rb"))&.[](/VERSION\s*=\s*"([^"]+)"/, 1)
    end

    # The short commit of the checkout at +root+.
    def commit(root = ROOT)
      capture("git", "rev-parse", "--short", "HEAD", chdir: root)
    end

    # Margay's default min:max threads (Configuration::DEFAULTS) of the checkout at +root+.
    def margay_default_threads(root = ROOT)
      capture(RbConfig.ruby, "-I", File.join(root, "lib"), "-rmargay/configuration", "-e",
              "d = Margay::Configuration::DEFAULTS; print d[:min_threads], ':', d[:max_threads]")
    end

    def wrk_version
      Env.which("wrk") && capture("wrk", "-v")&.lines&.first&.strip&.sub(/ Copyright.*/, "")
    end

    def nginx_version
      (nginx = Env.which("nginx")) && capture(nginx, "-v")
    end

    # bench/Gemfile.lock, the peers' resolved versions ("" when it is missing).
    def bench_lock
      read(File.join(BENCH, "Gemfile.lock")) || ""
    end

    # The version +gem+ resolved to in a Gemfile.lock's text.
    def locked(lock_text, gem)
      lock_text[/^    #{Regexp.escape(gem)} \(([^)]+)\)/, 1]
    end

    def read(path)
      File.read(path)
    rescue SystemCallError
      nil
    end
  end
end
