# frozen_string_literal: true

require_relative "../support/cluster_process"

# Single mode signals as Puma's single mode: USR2 and USR1 restart in place
# (the request in flight completes, the same pid serves on the same port),
# HUP stops gracefully, or reopens the redirected stdout/stderr.
class SingleSignalsTest < Minitest::Test
  include ClusterProcess

  APP = File.expand_path("../support/single_app.ru", __dir__)

  def start(config = "")
    @dir = Dir.mktmpdir("margay-single-")
    File.write(File.join(@dir, "margay.rb"), config)
    spawn_master("-b", "tcp://127.0.0.1:0", "-C", File.join(@dir, "margay.rb"), APP)
    wait_for_listening
  end

  def get(path)
    raw_exchange(@port, "GET #{path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10)
  end

  def body(response)
    response[/\r\n\r\n(.*)\z/m, 1]
  end

  def restart_with(signal)
    start("on_restart { puts \"HOOK before_restart \#{Process.pid}\" }\n")
    slow = Thread.new { get("/slow") }
    wait_for_log(/slow request in/)
    Process.kill(signal, @master)
    response = slow.value
    assert_match(%r{\AHTTP/1.1 200}, response, "the request in flight completes")
    assert_equal @master.to_s, body(response).split.first
    wait_for_log(/Listening on/, count: 2)
    assert_match(/HOOK before_restart #{@master}/, log_text)
    assert_equal @master.to_s, body(get("/pid")).split.first, "the same process (exec) serves on the same port"
    assert @process.alive?
    assert_predicate stop_cluster, :success?
  end

  def test_usr2_restarts_in_place
    restart_with(:USR2)
  end

  def test_usr1_restarts_in_place_too
    restart_with(:USR1)
    assert_match(/no phased restart in single mode/, log_text)
  end

  # A deploy's USR2 followed by systemd's TERM while the request drains: the
  # stop wins (no re-exec), the request completes, the process exits 0.
  def test_term_during_a_restart_stops
    start
    slow = Thread.new { get("/slow") }
    wait_for_log(/slow request in/)
    Process.kill(:USR2, @master)
    wait_for_log(/restarting in place/)
    Process.kill(:TERM, @master)
    assert_match(%r{\AHTTP/1.1 200}, slow.value, "the request in flight completes")
    assert_predicate master_exit(15, "still running after TERM:\n#{log_text}"), :success?
    refute_match(/Margay restarting in place/, log_text, "no re-exec after the stop")
  end

  # Puma's backtrace signal (PWR on Linux): every thread's backtrace in the log; it serves on.
  def test_the_backtrace_signal_logs_every_thread
    skip "no INFO or PWR signal here" unless Margay::Runner::BACKTRACE_SIGNAL
    start
    Process.kill(Margay::Runner::BACKTRACE_SIGNAL, @master)
    wait_for_log(/Thread: TID-\w+.*\n  \S+:\d+/)
    assert_match(%r{\AHTTP/1.1 200}, get("/pid"))
    assert_predicate stop_cluster, :success?
  end

  def test_hup_stops_gracefully_when_nothing_is_redirected
    start
    slow = Thread.new { get("/slow") }
    wait_for_log(/slow request in/)
    Process.kill(:HUP, @master)
    assert_match(%r{\AHTTP/1.1 200}, slow.value)
    assert_predicate master_exit(10), :success?
  end
end
