# frozen_string_literal: true

require "test_helper"
require "json"
require "margay/launcher/demo_app"

# The built-in page and its JSON, checked under Rack::Lint with Rack::MockRequest.
class DemoAppTest < Minitest::Test
  def setup
    @config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], min_threads: 1, max_threads: 7,
                                        environment: "demo-env", header_timeout: 12, max_body_size: nil)
    @stats = { requests: 41, connections: 3, threads: 2, busy_threads: 1 }
    app = Margay::DemoApp.new(@config, stats: -> { @stats }, addresses: -> { ["tcp://127.0.0.1:43121"] })
    @request = Rack::MockRequest.new(Rack::Lint.new(app))
  end

  def test_page_shows_version_settings_and_counters
    response = @request.get("/")
    assert_equal 200, response.status
    assert_equal "text/html; charset=utf-8", response.headers["content-type"]
    body = response.body
    assert_includes body, "Margay #{Margay::VERSION}"
    assert_includes body, "tcp://127.0.0.1:43121"
    assert_includes body, "1:7"
    assert_includes body, "demo-env"
    assert_match %r{<th>header_timeout</th><td>12 s</td>}, body
    assert_match %r{<th>max_body_size</th><td>unlimited / automatic</td>}, body
    assert_match %r{<td id="stat-requests">41</td>}, body
    assert_equal body.bytesize.to_s, response.headers["content-length"]
  end

  def test_stats_json_reads_the_live_counters
    first = JSON.parse(@request.get("/stats.json").body)
    assert_equal Margay::VERSION, first["version"]
    assert_equal 41, first.dig("stats", "requests")
    @stats = @stats.merge(requests: 42)
    response = @request.get("/stats.json")
    assert_equal "application/json", response.headers["content-type"]
    assert_equal "no-store", response.headers["cache-control"]
    assert_equal 42, JSON.parse(response.body).dig("stats", "requests")
  end

  def test_head_has_headers_and_no_body
    response = @request.request("HEAD", "/")
    assert_equal 200, response.status
    assert_equal "", response.body
    refute_equal "0", response.headers["content-length"]
  end

  def test_settings_are_escaped
    config = @config.with(environment: "<script>")
    app = Rack::Lint.new(Margay::DemoApp.new(config))
    body = Rack::MockRequest.new(app).get("/").body
    refute_includes body, "<td><script>"
    assert_includes body, "&lt;script&gt;"
  end

  def test_unknown_path_and_method
    assert_equal 404, @request.get("/nope").status
    response = @request.post("/")
    assert_equal 405, response.status
    assert_equal "GET, HEAD", response.headers["allow"]
  end
end
