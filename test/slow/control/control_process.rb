# frozen_string_literal: true

require "test_helper"
require_relative "../../support/processes"
require "json"
require "net/http"
require "open3"
require "tmpdir"
require "fileutils"
require "yaml"

# Test support (internal): a Margay process from serve.rb, run with Margay's
# bundle or bench/Gemfile's (the puma gem: pumactl, real plugins), its
# output collected, and the real pumactl run against it.
module ControlProcess
  ROOT = File.expand_path("../../..", __dir__)
  SERVE = File.expand_path("serve.rb", __dir__)
  BENCH_GEMFILE = File.join(ROOT, "bench", "Gemfile")
  MAIN_GEMFILE = File.join(ROOT, "Gemfile")

  # Puma 8's stats keys, in Puma's order (as `pumactl stats` prints them from Puma 8.0.2).
  LAST_STATUS_KEYS = %w[backlog running pool_capacity busy_threads io_threads backlog_max max_threads requests_count
                        reactor_max].freeze
  SINGLE_KEYS = ["started_at", *LAST_STATUS_KEYS, "versions"].freeze
  CLUSTER_KEYS = %w[started_at workers phase booted_workers old_workers worker_status versions].freeze
  WORKER_KEYS = %w[started_at pid index phase booted last_checkin last_status].freeze

  def setup
    @dir = Dir.mktmpdir("margay-control-")
    @state = File.join(@dir, "puma.state")
    @pid = nil
  end

  def teardown
    @margay&.kill(timeout: 5)
  ensure
    FileUtils.remove_entry(@dir)
  end

  # Start serve.rb with +settings+ (control app and state file on unless
  # given); gemfile: which bundle. Returns once it listens.
  def start_margay(gemfile: BENCH_GEMFILE, env: {}, **settings)
    settings = { control_url: "tcp://127.0.0.1:0", state_path: @state }.merge(settings)
    env = { "BUNDLE_GEMFILE" => gemfile, "MARGAY_CTL_SETTINGS" => JSON.generate(settings), "RUBYOPT" => nil,
            "RUBYLIB" => File.join(ROOT, "lib") }.merge(env)
    @margay = Margay::TestProcess.new(env, "bundle", "exec", RbConfig.ruby, SERVE, chdir: @dir, in: File::NULL).start
    @pid = @margay.pid
    wait_for_log(/Listening on/)
    wait_for_log(/Starting control server/) if settings[:control_url]
    wait_for_log(/booted/, count: settings[:workers]) if settings[:workers].to_i.positive?
    @port = log_text[%r{Listening on tcp://127\.0\.0\.1:(\d+)}, 1].to_i
  end

  def log_text = @margay.output

  # Wait until +pattern+ appears +count+ times in the output.
  def wait_for_log(pattern, count: 1, timeout: 30)
    return if @margay.wait_for(pattern, count: count, timeout: timeout)

    flunk "margay exited; output:\n#{log_text}" if @margay.exited?
    flunk "no #{count}x #{pattern.inspect} within #{timeout}s; output:\n#{log_text}"
  end

  # Run the puma gem's pumactl with +args+: [output, exit status].
  def pumactl(*args)
    out, status = Open3.capture2e({ "BUNDLE_GEMFILE" => BENCH_GEMFILE, "RUBYOPT" => nil }, "bundle", "exec", "pumactl",
                                  *args, chdir: @dir)
    [out, status.exitstatus]
  end

  # pumactl's answer body for +command+ (asserting it succeeded), parsed.
  def pumactl_json(*args)
    out, status = pumactl(*args)
    assert_equal 0, status, out
    assert_includes out, "Command #{args.last} sent success"
    JSON.parse(out.lines.last)
  end

  def state
    YAML.safe_load(File.read(@state))
  end

  def get(path = "/")
    Net::HTTP.get(URI("http://127.0.0.1:#{@port}#{path}"))
  end

  # Wait until the block is truthy.
  def eventually(what, timeout: 30)
    deadline = Margay::Clock.now + timeout
    until (value = yield)
      flunk "#{what}: not within #{timeout}s; output:\n#{log_text}" if Margay::Clock.now > deadline
      sleep 0.1
    end
    value
  end

  # Wait for the process to exit: its exit status.
  def wait_exit(timeout: 30)
    status = @margay.wait_exit(timeout: timeout)
    assert status, "margay did not exit; output:\n#{log_text}"
    status.exitstatus
  end
end
