# frozen_string_literal: true

require "minitest/autorun"
require_relative "../../bench/lib/balancers"

# docs/OPERATIONS.md shows the HAProxy and nginx configurations the rolling-restart test and
# bench run (bench/lib/balancers.rb writes them): each block in the doc is what the code writes
# for the doc's addresses, so that what a reader copies is what was tested.
class OperationsDocTest < Minitest::Test
  DOC = File.expand_path("../../docs/OPERATIONS.md", __dir__)
  BACKENDS = (1..3).map { |i| { name: "web#{i}", address: "10.0.0.1#{i}", port: 3000, check: "/readyz", check_port: 9393 } }

  def test_the_haproxy_block_is_what_the_tests_run
    config = MargayBench::Balancers::HAProxy.new(dir: "/tmp", port: 8080, backends: BACKENDS).config
    assert_includes blocks, config
  end

  def test_the_nginx_block_is_what_the_tests_run
    config = MargayBench::Balancers::Nginx.new(dir: "/var/lib/nginx-fleet", port: 8080, backends: BACKENDS).config
    assert_includes blocks, config
  end

  private

  def blocks
    File.read(DOC).scan(/^```\n(.*?)^```$/m).flatten
  end
end
