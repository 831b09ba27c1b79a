# frozen_string_literal: true

# bench/run.rb workload "cpu": about 5 ms of pure Ruby per request (no I/O, holds the GVL).
# The work is a fixed amount (CPU_ITERATIONS), not a timed loop, so every server does
# the same work; 72_000 iterations took ~5 ms on the reference machine (Ruby 3.1, no JIT).
CPU_ITERATIONS = Integer(ENV.fetch("BENCH_CPU_ITERATIONS", "72000"))

def bench_cpu_work(n)
  acc = 0
  i = 0
  while i < n
    acc = (acc + (i * i) % 7) ^ (i & 0xff)
    i += 1
  end
  acc
end

run lambda { |_env|
  body = "cpu #{bench_cpu_work(CPU_ITERATIONS)}\n"
  [200, { "content-type" => "text/plain", "content-length" => body.bytesize.to_s }, [body]]
}
