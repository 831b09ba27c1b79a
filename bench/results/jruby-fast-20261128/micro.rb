# JRuby micro-measure of the pure engine's per-request pieces (no sockets).
require "margay"
require "margay/pure"

config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], silent: true, max_threads: 16)
engine = Margay::Pure::Engine.new(config.to_h.values_at(*Margay::Pure::Engine::SETTINGS), Margay::Server::RequestHandler.env_template(config))
engine.add_listener(TCPServer.new("127.0.0.1", 0), false, "127.0.0.1", "9292")
REQ = "GET / HTTP/1.1\r\nHost: 127.0.0.1:9292\r\n\r\n".b
cfg = engine.instance_variable_get(:@cfg)
conn = Margay::Pure::Reactor::Conn.new(nil, +"".b, 0, "127.0.0.1", nil, nil, nil, 0, 0)
conn.head = Margay::Pure::Parser.parse(REQ.dup, max_head: cfg[:max_header_size], max_target: cfg[:max_request_target], max_headers: cfg[:max_headers])
p conn.head.class
HEADERS = { "content-type" => "text/plain", "content-length" => "13" }
def bench(name, n)
  best = nil
  5.times do
    t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    n.times { yield }
    d = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t) / n * 1e9
    best = d if best.nil? || d < best
  end
  printf "%-12s %8.0f ns\n", name, best
end
p Margay::Pure::FAST
rounds = (ARGV[0] || 6).to_i
rounds.times do |r|
  puts "-- round #{r + 1}"
  bench("parse", 200_000) { Margay::Pure::Parser.parse(REQ.dup, max_head: cfg[:max_header_size], max_target: cfg[:max_request_target], max_headers: cfg[:max_headers], methods: nil) }
  bench("env_for", 200_000) { engine.send(:env_for, conn) }
  bench("head", 200_000) { b = engine.send(:head_begin, 200, HEADERS); engine.send(:head_finish, conn, b, 200, 13) }
  h = conn.head



  bench("handler", 100_000) { HANDLER.call(1, engine.send(:env_for, conn)) } if defined?(HANDLER)
end
