# frozen_string_literal: true

require "test_helper"
require_relative "../../support/processes"
require "ipaddr"
require "json"
require "net/http"
require "open3"
require "fileutils"
require "tmpdir"

# Test support (internal): run Puma and Margay the same way a user would,
# `bundle exec puma ARGS` / `bundle exec margay ARGS` from an app directory,
# both from bench/Gemfile (a bundle that holds both servers and the Rails
# gems, as an app switching from one to the other has), and look at them from
# the outside: the sockets they listen on (read from /proc, not from their
# banners), their output, their processes, their exit status.
module SideBySide
  # The side-by-side cases mostly wait (for boots, a 2 s request, a restart):
  # four at a time, whatever the core count (MT_CPU overrides).
  Minitest.parallel_executor = Minitest::Parallel::Executor.new(Integer(ENV.fetch("MT_CPU", "4")))

  ROOT = File.expand_path("../../..", __dir__)
  GEMFILE = File.join(ROOT, "bench", "Gemfile")
  SERVERS = %i[puma margay].freeze
  # What the child must not inherit from the test's own bundle or environment.
  CLEAN_ENV = {
    "BUNDLE_GEMFILE" => GEMFILE, "RUBYOPT" => nil, "BUNDLER_SETUP" => nil, "RACK_ENV" => nil,
    "RAILS_ENV" => nil, "WEB_CONCURRENCY" => nil, "PORT" => nil, "MAX_THREADS" => nil,
    "MIN_THREADS" => nil, "PUMA_MAX_THREADS" => nil, "PUMA_MIN_THREADS" => nil,
    "RAILS_MAX_THREADS" => nil, "RAILS_MIN_THREADS" => nil, "PIDFILE" => nil
  }.freeze
  # The environment the test itself was started with, before `bundle exec`
  # (RUBYOPT=-rbundler/setup, BUNDLER_ORIG_*: a child that inherits them boots
  # half inside the test's bundle, and Puma's restart then fails on
  # Bundler::ORIGINAL_ENV).
  BASE_ENV = (defined?(Bundler) ? Bundler.original_env : ENV.to_h).freeze

  # The full environment for a child: BASE_ENV, CLEAN_ENV, then +env+.
  def self.child_env(env = {})
    BASE_ENV.merge(CLEAN_ENV).merge(env)
  end

  # The app both servers serve: / answers "ok PID"; /slow announces itself on
  # stdout ("slow request started") then sleeps SLOW_SECONDS.
  APP = <<~'RUBY'
    $stdout.sync = true
    run lambda { |env|
      case env["PATH_INFO"]
      when "/slow"
        puts "slow request started"
        sleep Float(ENV.fetch("SLOW_SECONDS", "2"))
        [200, { "content-type" => "text/plain" }, ["slow done"]]
      else
        [200, { "content-type" => "text/plain" }, ["ok #{Process.pid}"]]
      end
    }
  RUBY

  # A fresh app directory with APP as config.ru; removed at teardown by the caller.
  def self.app_dir(prefix = "margay-compat-")
    dir = Dir.mktmpdir(prefix)
    File.write(File.join(dir, "config.ru"), APP)
    dir
  end

  # One listening socket as a user sees it in `ss -l`: "tcp 127.0.0.1",
  # "tcp [::]", "unix /path" (ports left out: tests bind port 0).
  Listener = Struct.new(:family, :host, :port, :path) do
    def to_s = family == "unix" ? "unix #{path}" : "#{family} #{host}"

    # Where a client connects to reach it.
    def connect_host
      case host
      when "0.0.0.0", "::" then "127.0.0.1"
      else host
      end
    end
  end

  # One server process tree started for a test.
  class Run < Margay::TestProcess
    attr_reader :server, :dir

    # +command+: what to run instead of `bundle exec SERVER` (e.g. ["bin/rails", "server", "-u", "puma"]).
    def initialize(server, args, dir:, env: {}, command: nil)
      @server = server
      @dir = dir
      super(SideBySide.child_env(env), *(command || ["bundle", "exec", server.to_s]), *args,
            chdir: dir, in: File::NULL, pgroup: true, unsetenv_others: true)
    end

    # This process and its descendants (workers, a mold...).
    def pids
      return [] if @status

      [@pid, *Margay::TestWatchdog.descendants(@pid)]
    end

    # The children of the server process itself.
    def children
      Dir["/proc/[0-9]*/stat"].filter_map do |stat|
        fields = File.read(stat)[/\) (.*)/, 1].split
        pid = Integer(File.basename(File.dirname(stat)))
        pid if Integer(fields[1]) == @pid && fields[0] != "Z"
      rescue Errno::ENOENT, Errno::ESRCH, ArgumentError
        nil
      end
    end

    # How many children the server has once that number has not changed for
    # +settle+ seconds (or what it is when +timeout+ runs out).
    def stable_children(timeout: 20, settle: 2)
      deadline = Margay::Clock.now + timeout
      last = nil
      since = Margay::Clock.now
      loop do
        now = children.size
        if now != last
          last = now
          since = Margay::Clock.now
        end
        return last if Margay::Clock.now - since > settle || Margay::Clock.now > deadline

        sleep 0.1
      end
    end

    # The sockets in LISTEN state that the process tree holds, sorted, each once.
    def listeners
      inodes = pids.flat_map { |pid| SideBySide.socket_inodes(pid) }.uniq
      SideBySide.listening_sockets.select { |inode, _| inodes.include?(inode) }.values.uniq.sort_by(&:to_s)
    end

    # Wait until it listens (and answers 200 on / when it listens on TCP or a
    # unix socket); the listeners once the banner says every bind is done (both
    # servers open their binds one after the other, and the first one can
    # answer before the next one listens).
    def wait_serving(timeout: 40)
      deadline = Margay::Clock.now + timeout
      loop do
        found = listeners
        if found.any? && ok?(found.first)
          wait_for(THREADS_LINE, timeout: 5) # the output reader may lag the socket; a silent server has none
          return listeners if wait_for(BOUND_LINE, timeout: 5)

          return found
        end
        return nil if Margay::Clock.now > deadline || exited?

        sleep 0.1
      end
    end

    def ok?(listener) = SideBySide.get(listener, "/").first == 200

    # The banner line with the thread counts (Margay's, Puma's).
    THREADS_LINE = /Threads: \d+:\d+|Max threads: *\d+/
    # The banner's last line, printed by both after every listener is open.
    BOUND_LINE = /Use Ctrl-C to stop/

    # TERM (then KILL for the whole group when it would not stop); the exit status.
    def stop(signal: "TERM", timeout: 30)
      return @status if exited?

      Process.kill(signal, @pid)
      wait_exit(timeout: timeout) || kill
    rescue Errno::ESRCH
      wait_exit(timeout: 5)
    end

    # Kill the process group it was started in (also workers that lost their master).
    def kill
      super(:KILL, group: true)
      nil
    end
  end

  # What a side-by-side test class includes (besides SideBySide): skip without the bench
  # bundle, #side_by_side to run a case on both servers at once, #assert_same to compare what
  # each saw, with the class's DIFFERENCES (what => {puma:, margay:, why:}) for the recorded,
  # deliberate ones; the runs and app directories it made are cleaned up after each test.
  module Case
    def setup
      SideBySide.skip_unless_bundle(self)
    end

    def teardown
      @runs&.each(&:kill)
      @dirs&.each { |dir| FileUtils.rm_rf(dir) }
    end

    # Run the block once per server, at the same time, each with its own app directory
    # (+app+: its config.ru, else SideBySide::APP); returns { puma: observation, margay: observation }.
    def side_by_side(prefix: "margay-compat-", app: nil, &block)
      @runs ||= []
      @dirs ||= []
      threads = SERVERS.to_h do |server|
        dir = SideBySide.app_dir(prefix)
        File.write(File.join(dir, "config.ru"), app) if app
        @dirs << dir
        [server, Thread.new { block.call(server, dir) }]
      end
      threads.transform_values(&:value)
    end

    # Both servers saw the same (observation[:seen]), or each what DIFFERENCES records for +what+.
    def assert_same(observed, what)
      puma = observed.fetch(:puma)
      margay = observed.fetch(:margay)
      if (difference = self.class::DIFFERENCES[what])
        assert_equal difference[:puma], puma[:seen], "#{what}: Puma no longer does what the recorded difference says"
        assert_equal difference[:margay], margay[:seen], "#{what}: Margay differs from its recorded difference (#{difference[:why]})"
        return
      end
      assert_equal puma[:seen], margay[:seen], lambda {
        "#{what}: Margay differs from Puma\n" \
          "puma:   #{puma[:seen].inspect}\nmargay: #{margay[:seen].inspect}\n" \
          "--- puma output (tail)\n#{puma[:output].to_s.lines.last(15).join}" \
          "--- margay output (tail)\n#{margay[:output].to_s.lines.last(15).join}"
      }
    end
  end

  module_function

  # Whether bench/Gemfile's bundle (Puma 8, Rails) is installed; checked once.
  def bundle_installed?
    return @bundle_installed unless @bundle_installed.nil?

    _, status = Open3.capture2e(child_env, "bundle", "check", chdir: ROOT, unsetenv_others: true)
    @bundle_installed = status.success?
  end

  # For a test's setup: skip, saying what to run, when the bundle is missing.
  def skip_unless_bundle(test)
    test.skip "bench/Gemfile is not installed: run `bundle install --gemfile bench/Gemfile`" unless bundle_installed?
  end

  # Socket inodes among /proc/PID/fd.
  def socket_inodes(pid)
    Dir["/proc/#{pid}/fd/*"].filter_map do |fd|
      File.readlink(fd)[/\Asocket:\[(\d+)\]\z/, 1]
    rescue Errno::ENOENT, Errno::EACCES
      nil
    end
  end

  # inode => Listener for every listening TCP (v4, v6) and unix stream socket on the machine.
  def listening_sockets
    found = {}
    { "tcp" => "/proc/net/tcp", "tcp6" => "/proc/net/tcp6" }.each do |family, table|
      File.readlines(table).drop(1).each do |line|
        fields = line.split
        next unless fields[3] == "0A" # TCP_LISTEN

        hex, port = fields[1].split(":")
        found[fields[9]] = Listener.new(family == "tcp" ? "tcp" : "tcp6", address(hex), port.to_i(16), nil)
      end
    rescue Errno::ENOENT
      nil
    end
    File.readlines("/proc/net/unix").drop(1).each do |line|
      fields = line.split
      # Flags __SO_ACCEPTCON (listening), type SOCK_STREAM, a path.
      next unless fields[3] == "00010000" && fields[4] == "0001" && fields[7]

      found[fields[6]] = Listener.new("unix", nil, nil, fields[7])
    end
    found
  end

  # An address from /proc/net/tcp{,6}: 32-bit words in host (little-endian) order.
  def address(hex)
    bytes = [hex].pack("H*").unpack("V*").pack("N*")
    IPAddr.new_ntoh(bytes).to_s
  end

  # GET +path+ from a Listener; [status, body] (status 0 when the connection failed).
  def get(listener, path, timeout: 10)
    sock = listener.family == "unix" ? UNIXSocket.new(listener.path) : Socket.tcp(listener.connect_host, listener.port, connect_timeout: 5)
    sock.write("GET #{path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    raw = +""
    deadline = Margay::Clock.now + timeout
    while (left = deadline - Margay::Clock.now).positive? && sock.wait_readable(left)
      chunk = sock.read_nonblock(65_536, exception: false)
      break if chunk.nil?

      raw << chunk if chunk.is_a?(String)
    end
    status = raw[%r{\AHTTP/1\.[01] (\d{3})}, 1].to_i
    [status, raw.split("\r\n\r\n", 2)[1].to_s]
  rescue SystemCallError, IOError
    [0, ""]
  ensure
    sock&.close
  end

  # The backlog of a listening TCP socket as `ss -lnt` shows it (Send-Q), nil without ss.
  def backlog(listener)
    return nil unless listener.family.start_with?("tcp") && system("command -v ss >/dev/null 2>&1")

    line = `ss -lntH 'sport = :#{listener.port}' 2>/dev/null`.lines.first
    line&.split&.at(2)&.to_i
  end

  # Run +server+ with +args+ to its exit (a refused start); [status, output].
  def run_to_exit(server, args, dir:, env: {}, timeout: 30)
    run = Run.new(server, args, dir: dir, env: env).start
    status = run.wait_exit(timeout: timeout)
    run.kill unless status
    [status, run.output]
  end

  # The keys of a JSON document as paths ("worker_status[].last_status.backlog"), sorted.
  def key_paths(value, prefix = nil)
    case value
    when Hash
      value.flat_map { |k, v| [[prefix, k].compact.join("."), *key_paths(v, [prefix, k].compact.join("."))] }.sort.uniq
    when Array
      value.first.is_a?(Hash) || value.first.is_a?(Array) ? key_paths(value.first, "#{prefix}[]") : []
    else
      []
    end
  end

  # [min, max] threads from a banner: Puma's "Min threads: N" and "Max threads: N",
  # or "Threads: MIN:MAX"; nil when it names neither.
  def threads_in(output)
    if (m = output.match(/Threads: (\d+):(\d+)/))
      [m[1].to_i, m[2].to_i]
    elsif (min = output[/Min threads: *(\d+)/, 1]) && (max = output[/Max threads: *(\d+)/, 1])
      [min.to_i, max.to_i]
    end
  end

  # Lines a server printed that a user would read as warnings.
  def warnings(output)
    output.lines.grep(/warn|deprecat|ignor|not supported|unsupported|unknown/i).map(&:chomp)
  end
end
