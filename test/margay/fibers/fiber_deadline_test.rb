# frozen_string_literal: true

require "test_helper"
require_relative "fiber_test_helper"

# Fiber mode's request_timeout (Server::FiberDeadline), over real sockets: the app call only
# (not the body's close nor the callbacks), and a computing fiber interrupted.
class FiberDeadlineTest < Minitest::Test
  skip_on_jruby "no fiber mode: it needs the C engine's epoll"
  include Margay::TestHelper
  include FiberTestHelper

  # request_timeout covers the app call only: a limit that expires while the body closes or
  # the rack.response_finished callbacks run leaves them all to run.
  def test_request_timeout_does_not_cut_body_close_or_callbacks
    ran = Queue.new
    body = Class.new do
      define_method(:each) { |&b| b.call("ok") }
      define_method(:close) do
        sleep 0.3
        ran << :closed
      end
    end
    app = lambda do |env|
      env["rack.response_finished"] << ->(*) { ran << :first_registered }
      env["rack.response_finished"] << lambda do |*|
        sleep 0.3
        ran << :second_registered
      end
      [200, { "content-type" => "text/plain", "content-length" => "2" }, body.new]
    end
    fiber_server(app, lint: false, request_timeout: 0.2) do |_host, port|
      assert_equal [200, "ok"], read_response(send_get(port, "/"), timeout: 5).values_at(0, 2)
      3.times { pop_within(ran, 5) }
    end
    assert_equal 0, ran.size
    refute_match(/RequestTimeout/, @server_log.string)
  end

  # A fiber that computes without waiting is interrupted by the supervisor, as a thread is
  # in thread mode: 503, and the thread serves on.
  def test_request_timeout_interrupts_a_computing_fiber
    app = lambda do |env|
      if env["PATH_INFO"] == "/spin"
        t = Margay::Clock.now
        nil while Margay::Clock.now - t < 5 # the supervisor gets the GVL once per time slice: a margin
        text("spun")
      else
        text("ok")
      end
    end
    fiber_server(app, request_timeout: 0.3) do |_host, port|
      assert_equal 503, read_response(send_get(port, "/spin"), timeout: 10).first
      assert_equal [200, "ok"], read_response(send_get(port, "/"), timeout: 5).values_at(0, 2)
    end
    assert_match(/request_timeout: GET \/spin ran/, @server_log.string)
  end
end
