# frozen_string_literal: true

# bench/handshakes.rb's app: hello world, and a Ruby thread of pure computation started by the
# first GET /tick, which answers how many rounds of work it has done so far. The thread's rate
# while clients hammer the server with new TLS connections, over its rate while nothing else
# runs, is how much of the Ruby VM (the GVL) the handshakes took.
TICKS = [0]
TICKER = Mutex.new

def start_ticker
  TICKER.synchronize do
    return if defined?(@ticker) && @ticker

    @ticker = Thread.new do
      loop do
        x = 0
        20_000.times { |i| x += i }
        TICKS[0] += 1
      end
    end
  end
end

run lambda { |env|
  if env["PATH_INFO"] == "/tick"
    start_ticker
    [200, { "content-type" => "text/plain" }, [TICKS[0].to_s]]
  else
    [200, { "content-type" => "text/plain", "content-length" => "11" }, ["Hello World"]]
  end
}
