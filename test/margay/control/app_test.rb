# frozen_string_literal: true

require "test_helper"
require "json"
require "margay/control/app"

# The control app's answers (Margay::Control::App): Puma's paths, token
# check and bodies, over a launcher that records what it was asked.
class ControlAppTest < Minitest::Test
  # What the app asks of a PumaLauncher.
  class FakeLauncher
    attr_reader :calls
    attr_accessor :clustered

    def initialize
      @calls = []
      @clustered = false
    end

    def clustered? = @clustered
    def stats = { started_at: "2026-11-24T14:00:00Z", running: 1 }
    def thread_status = [["Thread: TID-1 main", ["a.rb:1"]]]
    %i[stop halt restart phased_restart refork reload_certificates].each { |name| define_method(name) { @calls << name } }
  end

  def setup
    @launcher = FakeLauncher.new
    @app = Margay::Control::App.new(@launcher, token: "s3cret")
  end

  def get(path, query = "token=s3cret")
    env = { "PATH_INFO" => path, "QUERY_STRING" => query }
    status, headers, body = @app.call(env)
    [status, headers, body.join, env[Margay::Control::App::AFTER_RESPONSE]]
  end

  def test_a_missing_or_wrong_token_is_refused_with_pumas_answer
    ["", "token=wrong", "token=s3cre", "xtoken=s3cret"].each do |query|
      status, headers, body = get("/stats", query)
      assert_equal 403, status, query
      assert_equal "Invalid auth token", body
      assert_equal "text/plain", headers["content-type"]
    end
    assert_equal 200, get("/stats", "a=1;token=s3cret")[0], "Puma splits on & and ;"
  end

  def test_no_token_lets_every_request_in
    app = Margay::Control::App.new(@launcher, token: nil)
    status, = app.call({ "PATH_INFO" => "/stats", "QUERY_STRING" => "" })
    assert_equal 200, status
  end

  def test_read_only_answers
    status, headers, body = get("/stats")
    assert_equal [200, "application/json"], [status, headers["content-type"]]
    assert_equal({ "started_at" => "2026-11-24T14:00:00Z", "running" => 1 }, JSON.parse(body))
    assert_equal body.bytesize.to_s, headers["content-length"]
    assert_kind_of Integer, JSON.parse(get("/gc-stats")[2]).fetch("count")
    assert_equal [{ "name" => "Thread: TID-1 main", "backtrace" => ["a.rb:1"] }], JSON.parse(get("/thread-backtraces")[2])
    assert_equal '{ "status": "ok" }', get("/gc")[2]
    assert_empty @launcher.calls
  end

  def test_actions_answer_ok_and_run_only_after_the_response
    { "/stop" => :stop, "/halt" => :halt, "/restart" => :restart, "/phased-restart" => :phased_restart,
      "/reload-certificates" => :reload_certificates }.each do |path, call|
      status, _, body, after = get(path)
      assert_equal [200, '{ "status": "ok" }'], [status, body], path
      assert_empty @launcher.calls, "#{path}: nothing happens before the answer is written"
      after.call
      assert_equal [call], @launcher.calls
      @launcher.calls.clear
    end
  end

  def test_refork_only_in_cluster_mode_and_unknown_paths
    status, _, body, after = get("/refork")
    assert_equal [404, '{ "error": "refork not available" }', nil], [status, body, after]
    @launcher.clustered = true
    status, _, _, after = get("/refork")
    assert_equal 200, status
    after.call
    assert_equal [:refork], @launcher.calls
    assert_equal [404, '{ "error": "reload_worker_directory not available" }'], get("/reload-worker-directory")[0, 3].values_at(0, 2)
    assert_equal [404, "Unsupported action"], get("/nope")[0, 3].values_at(0, 2)
  end
end
