# frozen_string_literal: true

require "test_helper"

# The hooks a serving process runs, over real sockets: the thread hooks in
# each pool thread, out_of_band once no request runs, and the
# lowlevel_error_handler's answer to an app exception.
class ServerHooksTest < Minitest::Test
  include Margay::TestHelper

  APP = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }

  def test_thread_hooks_run_in_each_pool_thread
    seen = Queue.new
    hooks = { before_thread_start: [->(control) { seen << [:start, Thread.current.name, control.max_threads] }],
              before_thread_exit: [-> { seen << [:exit, Thread.current.name] }] }
    with_server(APP, hooks: hooks, min_threads: 2, max_threads: 4) do |_, port|
      assert_match(/200/, raw_get(port))
    end
    events = []
    events << seen.pop until seen.empty?
    starts = events.select { |e| e[0] == :start }
    assert_equal [["margay-0", 4], ["margay-1", 4]], starts.map { |e| e[1..] }.sort.first(2)
    assert_equal starts.map { |e| e[1] }.sort, events.select { |e| e[0] == :exit }.map { |e| e[1] }.sort,
                 "each thread that started runs before_thread_exit as it ends"
  end

  def test_out_of_band_runs_in_a_pool_thread_once_no_request_runs
    ran = Queue.new
    with_server(APP, hooks: { out_of_band: [-> { ran << Thread.current.name }] }) do |_, port|
      assert_match(/200/, raw_get(port))
      assert_match(/\Amargay-\d+\z/, pop_within(ran))
    end
  end

  def test_a_raising_thread_hook_is_logged_and_the_thread_serves
    with_server(APP, hooks: { before_thread_start: [->(_) { raise "hook down" }] }) do |_, port|
      assert_match(%r{\AHTTP/1.1 200}, raw_get(port))
    end
    assert_match(/before_thread_start hook failed: RuntimeError: hook down/, @last_server_log)
  end

  def boom
    ->(_env) { raise ArgumentError, "boom" }
  end

  def test_lowlevel_error_handler_answers_an_app_exception_as_puma_calls_it
    handlers = {
      ->(e) { [502, {}, ["one #{e.message}"]] } => "one boom",
      ->(e, env) { [502, {}, ["two #{e.message} #{env['PATH_INFO']}"]] } => "two boom /x",
      ->(e, env, status) { [502, {}, ["three #{e.class} #{env['PATH_INFO']} #{status}"]] } => "three ArgumentError /x 500",
      proc { |*args| [502, { "x-n" => args.size.to_s }, ["any"]] } => "any"
    }
    handlers.each do |handler, body|
      with_server(boom, lint: false, lowlevel_error_handler: handler) do |_, port|
        response = raw_get(port, "/x")
        assert_match(%r{\AHTTP/1.1 502}, response)
        assert response.end_with?(body), response
      end
    end
  end

  def test_a_raising_or_invalid_lowlevel_error_handler_gives_the_plain_500
    [->(_e) { raise "handler down" }, ->(_e) { [200, { "Bad Name" => "x" }, []] }].each do |handler|
      with_server(boom, lint: false, environment: "production", lowlevel_error_handler: handler) do |_, port|
        assert_match(%r{\AHTTP/1.1 500}, raw_get(port))
      end
      assert_match(/lowlevel_error_handler/, @last_server_log)
    end
  end
end
