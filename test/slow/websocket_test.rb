# frozen_string_literal: true

require_relative "support/cluster_process"
require "support/websocket_client"

# WebSocket through a Rack 3 streaming body in cluster mode, through the real
# executable: `exe/margay -w 2` serving test/support/websocket_echo.rb, real
# websocket-driver clients talking to the forked workers, then a graceful
# stop (TERM) while the WebSockets are open: it ends them within
# shutdown_timeout and the cluster exits.
class WebSocketTest < Minitest::Test
  include ClusterProcess

  ECHO = File.expand_path("../support/websocket_echo.rb", __dir__)

  def test_websockets_in_cluster_mode_and_a_graceful_stop
    @dir = Dir.mktmpdir("margay-ws-")
    File.write(File.join(@dir, "config.ru"), "require #{ECHO.inspect}\nrun Margay::WebSocketEcho\n")
    File.write(File.join(@dir, "margay.rb"), "shutdown_timeout 2\n")
    spawn_master("-w", "2", "-t", "4:4", "-b", "tcp://127.0.0.1:0", "-C", "margay.rb", "config.ru")
    wait_for_listening
    wait_for_log(/booted/, count: 2)

    clients = Array.new(4) { Margay::WebSocketClient.new(@port, "/", timeout: 20) }
    clients.each { |c| assert c.open?, log_text }
    clients.each_with_index { |c, i| c.text("message #{i}") }
    clients.each_with_index { |c, i| assert_equal "echo: message #{i}", c.receive }
    clients.each { |c| c.text("pid") }
    served_by = clients.map { |c| c.receive.to_i }
    assert_empty served_by - worker_pids, "every WebSocket is served by a worker"

    # one client says goodbye: the server closes with a close frame
    clients.first.text("bye")
    assert_equal "echo: bye", clients.first.receive
    assert_equal 1000, clients.first.closed&.code

    # the others are still open when the cluster stops; the stop ends them
    stop_cluster
    refute @process.alive?, "the cluster exited"
    clients.drop(1).each { |c| assert c.ended?, "the connection ended" }
  ensure
    clients&.each(&:close)
  end
end
