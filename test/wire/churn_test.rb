# frozen_string_literal: true

require "test_helper"

# Connections opened and closed quickly from several clients at once, so the
# kernel hands out the same fd numbers again while other threads still work:
# every request must be answered and the server must stop cleanly.
class ChurnTest < Minitest::Test
  include Margay::TestHelper

  CLIENTS = 4
  CONNECTIONS = 150
  REQUESTS = 3

  def test_short_keep_alive_connections_from_parallel_clients
    with_server(HELLO, max_threads: 4) do |_, port|
      failures = Queue.new
      clients = Array.new(CLIENTS) do
        Thread.new do
          CONNECTIONS.times do
            sock = TCPSocket.new("127.0.0.1", port)
            REQUESTS.times do
              sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
              status, = read_response(sock, timeout: 3)
              failures << status unless status == 200
            end
          rescue EOFError, SystemCallError => e
            failures << e
          ensure
            sock&.close
          end
        end
      end
      clients.each(&:join)
      assert_equal 0, failures.size, "failed: #{Array.new(failures.size) { failures.pop }.first(5).inspect}"
    end
  end
end
