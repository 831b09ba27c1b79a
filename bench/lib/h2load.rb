# frozen_string_literal: true

require_relative "procs"

module MargayBench
  # One bounded h2load run (nghttp2's load generator), its summary parsed. h2load prints no
  # latency percentiles: "time for request" gives min, max, mean and sd.
  module H2load
    UNITS = { "us" => 0.001, "ms" => 1.0, "s" => 1000.0 }.freeze

    module_function

    # +streams+ requests in flight per connection (-m); +h1+: HTTP/1.1 (--h1; with streams 1,
    # no pipelining). A +warm_up+ s phase first, then +seconds+ s measured (-D).
    def argv(url:, connections:, streams:, seconds:, warm_up:, threads: 2, h1: false)
      ["h2load", "-t#{[threads, connections].min}", "-c#{connections}", "-m#{streams}", "-D#{seconds}",
       "--warm-up-time=#{warm_up}", *("--h1" if h1), url]
    end

    # Runs +argv+ with its output in +out_path+, killed after +bound+ seconds; the parsed
    # summary (#parse).
    def run(argv, out_path:, bound:)
      status, out = Procs.run_bounded(argv, out_path: out_path, bound: bound)
      parse(out) || raise("h2load failed (#{status}): #{out.lines.last(5).join}")
    end

    # h2load's summary as a Hash (nil without one): rps, requests (done), succeeded, failed,
    # errored, timeout, non_2xx, min/max/mean/sd_ms of the time for a request, and what the
    # connections negotiated: tls (protocol), cipher, temp_key, protocol (ALPN or h2c).
    def parse(out)
      rps = out[%r{^finished in \S+, ([\d.]+) req/s}, 1]
      counts = out.match(/^requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/)
      return nil unless rps && counts

      status = out.match(/^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/)&.captures&.map(&:to_i) || [0, 0, 0, 0]
      times = out[/^time for request:\s+(.*)$/, 1].to_s.scan(/([\d.]+)(us|ms|s)\b/).map { |v, u| v.to_f * UNITS.fetch(u) }
      r = { "rps" => rps.to_f, **%w[requests succeeded failed errored timeout].zip(counts.captures.map(&:to_i)).to_h,
            "non_2xx" => status.drop(1).sum, **%w[min_ms max_ms mean_ms sd_ms].zip(times).to_h }
      r.merge("tls" => out[/^TLS Protocol: (.*)$/, 1], "cipher" => out[/^Cipher: (.*)$/, 1],
              "temp_key" => out[/^Server Temp Key: (.*)$/, 1], "protocol" => out[/^Application protocol: (.*)$/, 1])
    end
  end
end
