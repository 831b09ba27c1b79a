# frozen_string_literal: true

require "socket"
require "margay/server"

# What the fiber-mode tests share: a server in fiber mode on one thread, a text
# answer, a request sent and left to read later.
module FiberTestHelper
  def fiber_server(app, **settings, &block)
    with_server(app, fiber_scheduler: true, event_backend: :auto, min_threads: 1, max_threads: 1, **settings, &block)
  end

  def text(body)
    [200, { "content-type" => "text/plain" }, [body.to_s]]
  end

  def send_get(port, path)
    sock = TCPSocket.new("127.0.0.1", port)
    sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\n\r\n")
    sock
  end
end
