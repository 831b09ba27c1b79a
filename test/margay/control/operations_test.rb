# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "open3"
require "margay/control/operations"

# Operations (Margay::Operations): the control app and the state file
# around a serving process, started and stopped together.
class OperationsTest < Minitest::Test
  # Stands for a Server: Server#stats's keys.
  class FakeServer
    def stats = { requests: 42, connections: 3, threads: 4, busy_threads: 3, errors: 0 }
  end

  def setup
    @dir = Dir.mktmpdir("margay-ops-")
    @log_io = StringIO.new
    @log = Margay::Log.new(out: @log_io, err: @log_io)
  end

  def teardown
    @ops&.stop
    FileUtils.remove_entry(@dir)
  end

  def operations(**settings)
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], **settings)
    @ops = Margay::Operations.start(config, @log, FakeServer.new)
  end

  def test_the_state_file_names_the_control_app_and_goes_at_stop
    path = File.join(@dir, "state.yml")
    operations(control_url: "tcp://127.0.0.1:0", state_path: path)
    token = File.read(path)[/^control_auth_token: (\h{32})$/, 1]
    refute_nil token, "a generated token is in the state file"
    refute_includes @log_io.string, token, "a secret stays out of the log, like Puma"
    assert_includes @log_io.string, "* Control token: generated, in #{path}"
    assert_includes File.read(path), "control_url: #{@ops.control.url}\n"
    @ops.stop
    @ops = nil
    refute File.exist?(path)
  end

  def test_token_none_means_no_token
    path = File.join(@dir, "state.yml")
    operations(control_url: "tcp://127.0.0.1:0", control_token: "none", state_path: path)
    refute_match(/Control token/, @log_io.string)
    assert_includes File.read(path), "control_auth_token: none\n", "like Puma's state file"
    port = @ops.control.url[/\d+\z/].to_i
    assert_match %r{\AHTTP/1\.0 200 }, TCPSocket.open("127.0.0.1", port) { |s| s.write("GET /stats HTTP/1.0\r\n\r\n") && s.read }
  end

  def test_a_control_url_that_cannot_bind_stops_the_start
    operations(control_url: "tcp://127.0.0.1:0")
    url = @ops.control.url
    assert_raises(Margay::ConfigError) { Margay::Operations.start(Margay::Configuration.new(control_url: url), @log, FakeServer.new) }
  end

  def test_a_generated_token_without_a_state_file_is_a_warning
    operations(control_url: "tcp://127.0.0.1:0")
    assert_equal 1, @log_io.string.scan(/WARN: the control app's token was generated at random/).size
    token = @ops.launcher.options[:control_auth_token]
    assert_match(/\A\h{32}\z/, token, "plugins still read it")
    refute_includes @log_io.string, token
  end

  def test_nothing_asked_nothing_opened
    operations
    assert_nil @ops.control
    assert_equal 42, Margay.stats_hash[:requests_count], "the stats source is set all the same"
  end

  # What a cluster master loads when no control server is asked for, then
  # one asked for in the same process: the control app (and Rack::Utils with
  # it) comes then, and answers over TCP. In a fresh Ruby: this one has
  # loaded everything already.
  LAZY_CONTROL = <<~'RUBY'
    require "margay"; require "margay/cli"; require "margay/cluster"; require "margay/launcher"; require "net/http"
    log = Margay::Log.new(out: StringIO.new, err: StringIO.new)
    server = Struct.new(:stats).new({ requests: 1, connections: 0, threads: 1, busy_threads: 0, errors: 0 })
    none = Margay::Operations.start(Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"]), log, server)
    puts "without: #{$LOADED_FEATURES.grep(%r{/rack/utils[.]rb\z}).size}"
    none.stop
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], control_url: "tcp://127.0.0.1:0", control_token: "t0k")
    ops = Margay::Operations.start(config, log, server)
    puts "with: #{$LOADED_FEATURES.grep(%r{/rack/utils[.]rb\z}).size}"
    puts "answer: #{Net::HTTP.get_response(URI("#{ops.control.url.sub("tcp://", "http://")}/stats?token=t0k")).code}"
    ops.stop
  RUBY

  def test_the_control_app_is_loaded_only_where_a_control_server_runs
    skip_on_jruby "the jruby-jars JRuby has no executable to spawn (RbConfig.ruby)"
    out, err, status = Open3.capture3(RbConfig.ruby, "-I", File.expand_path("../../../lib", __dir__), "-e", LAZY_CONTROL)
    assert status.success?, err
    assert_equal "without: 0\nwith: 1\nanswer: 200\n", out
  end
end
