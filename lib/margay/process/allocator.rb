# frozen_string_literal: true

require "rbconfig"

module Margay
  # The `jemalloc` setting: the process runs on jemalloc instead of glibc's malloc. A running
  # process cannot change its allocator, so when it is asked for and not in use, the process
  # executes itself again at once with the library in LD_PRELOAD (before binding or loading
  # anything: the same pid, the same arguments and environment besides). Forked workers, the
  # mold and hot restarts inherit it. Where the library is missing, or the preload did not take,
  # the process says so in one line and serves on malloc.
  module Allocator
    # Set on that one re-execution: a preload that did not take is reported, never retried.
    REEXEC_ENV = "MARGAY_JEMALLOC_EXEC"
    # Where distributions put libjemalloc (Debian/Ubuntu's libjemalloc2 per architecture,
    # Fedora/RHEL's jemalloc, Alpine's, a source build's, Homebrew's).
    SEARCH = %w[/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/aarch64-linux-gnu/libjemalloc.so.2
                /usr/lib64/libjemalloc.so.2 /usr/lib/libjemalloc.so.2 /usr/local/lib/libjemalloc.so.2
                /usr/lib/libjemalloc.so.1 /opt/homebrew/lib/libjemalloc.2.dylib].freeze

    module_function

    # "jemalloc" when this process allocates with it (preloaded, or Ruby linked with it), else
    # "malloc".
    def name
      @name ||= jemalloc_loaded? ? "jemalloc" : "malloc"
    end

    def jemalloc_loaded?
      return true if RbConfig::CONFIG.values_at("MAINLIBS", "LIBS").join(" ").include?("jemalloc")

      File.foreach("/proc/self/maps").any? { |line| line.include?("libjemalloc") }
    rescue SystemCallError
      false
    end

    # The library the setting names: a path as given (nil if it is not a file), or with
    # +true+ the first of SEARCH that exists.
    def library(setting)
      return (File.file?(setting) ? setting : nil) if setting.is_a?(String)

      SEARCH.find { |path| File.file?(path) }
    end

    # Called first thing by the launcher, before it redirects output or changes directory.
    # Replaces the process with +argv+ (the script and its arguments, nil when not started by
    # the margay command) run by this Ruby with the library preloaded, when the setting asks
    # for jemalloc and the process does not run on it. Otherwise returns the warning to log
    # (nil: nothing to say).
    def reexec(setting, argv)
      reexecuted = ENV.delete(REEXEC_ENV)
      return nil if !setting || name == "jemalloc"
      return "jemalloc ignored on JRuby (the JVM manages its own heap)" if RUBY_ENGINE == "jruby"
      return "jemalloc: LD_PRELOAD=#{ENV['LD_PRELOAD']} did not take effect; serving on malloc" if reexecuted

      path = library(setting)
      unless path
        where = setting.is_a?(String) ? setting : SEARCH.join(", ")
        return "jemalloc: no library at #{where} (Debian: apt-get install libjemalloc2); serving on malloc"
      end
      return "jemalloc needs the margay command to re-execute itself; preload it yourself: LD_PRELOAD=#{path}" unless argv

      preload = [path, ENV["LD_PRELOAD"]].compact.reject(&:empty?).join(" ")
      Kernel.exec({ "LD_PRELOAD" => preload, REEXEC_ENV => "1" }, RbConfig.ruby, *argv, close_others: false)
    end
  end
end
