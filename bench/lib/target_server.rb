# frozen_string_literal: true

require "etc"
require_relative "server_instance"
require_relative "servers"

module MargayBench
  # The app every attack runs against (written to a tmp dir as config.ru).
  ATTACK_APP = <<~'RUBY'
    # frozen_string_literal: true
    BIG = ("x" * (16 << 20)).freeze
    CHUNK = ("y" * 65_536).freeze
    HELLO = "Hello, World!"
    # A streamed body of unknown length: the server writes it chunk by chunk.
    class Streamed
      def each
        256.times { yield CHUNK }
      end
    end
    # 50 ms of this thread's CPU time (the pipelining hog's request, and its victim's).
    def burn(seconds)
      stop = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + seconds
      x = 0
      x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < stop
      x
    end
    run lambda { |env|
      case env["PATH_INFO"]
      when "/cpu"
        burn(0.05)
        [200, { "content-type" => "text/plain", "content-length" => "4" }, ["done"]]
      when "/big" then [200, { "content-type" => "text/plain", "content-length" => BIG.bytesize.to_s }, [BIG]]
      when "/stream" then [200, { "content-type" => "text/plain" }, Streamed.new]
      when "/echo"
        size = env["rack.input"] ? env["rack.input"].read.bytesize : 0
        [200, { "content-type" => "text/plain" }, [size.to_s]]
      else [200, { "content-type" => "text/plain", "content-length" => "13" }, [HELLO]]
      end
    }
  RUBY

  # The server under attack (bench/attacks.rb) or soaked (bench/soak.rb): started from its
  # real executable with default settings and ATTACK_APP (or +app+) as config.ru in +dir+,
  # optionally with a lower RLIMIT_NOFILE, and read from /proc while it runs (of the
  # server process itself: both servers run in single mode).
  class TargetServer < ServerInstance
    # @param name [String] "margay" or "puma"
    # @param dir [String] holds config.ru and the server's log
    # @param nofile [Integer, nil] RLIMIT_NOFILE for the server process
    # @param threads [String, nil] "MIN:MAX" for both servers (nil: Margay's default, Puma's 0:5)
    def initialize(name, dir, nofile: nil, app: ATTACK_APP, threads: nil)
      super(name, tmp: dir, start_timeout: 30)
      @nofile = nofile
      @threads = threads
      File.write(File.join(dir, "config.ru"), app)
    end

    def start
      argv, env = case @name
                  when "margay"
                    [Servers.margay(@port, "config.ru", exe: File.join(ROOT, "exe", "margay"), quiet: nil, threads: @threads),
                     { "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile") }]
                  when "puma"
                    [Servers.puma(@port, "config.ru", config: nil, quiet: nil, threads: @threads || "0:5"),
                     { "BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile") }]
                  else raise ArgumentError, "unknown server #{@name}"
                  end
      launch(Env.clean.merge(env), argv, chdir: @tmp, **(@nofile ? { rlimit_nofile: @nofile } : {}))
    end

    def alive?
      !@pid.nil? && Procs.alive?(@pid)
    end

    # User + system CPU seconds used so far.
    def cpu
      fields = File.read("/proc/#{@pid}/stat").split(") ", 2).last.split
      (fields[11].to_i + fields[12].to_i) / Etc.sysconf(Etc::SC_CLK_TCK).to_f
    rescue Errno::ENOENT
      0.0
    end

    def rss_kb
      status_field("VmRSS")
    end

    def threads
      status_field("Threads")
    end

    def fds
      Dir.children("/proc/#{@pid}/fd").size
    rescue Errno::ENOENT
      0
    end

    # Descriptors pointing at unlinked files (request bodies in tempfiles).
    def tempfiles
      Dir.children("/proc/#{@pid}/fd").count do |fd|
        File.readlink("/proc/#{@pid}/fd/#{fd}").include?("(deleted)")
      rescue Errno::ENOENT
        false
      end
    rescue Errno::ENOENT
      0
    end

    private

    def status_field(name)
      File.read("/proc/#{@pid}/status")[/^#{name}:\s+(\d+)/, 1].to_i
    rescue Errno::ENOENT
      0
    end
  end
end
