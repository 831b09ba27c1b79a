# frozen_string_literal: true

# bench/run.rb workload "big": a 1 MiB response body (one frozen string, built once).
BIG = ("0123456789abcdef" * 65_536).freeze # 1 MiB

run lambda { |_env|
  [200, { "content-type" => "application/octet-stream", "content-length" => BIG.bytesize.to_s }, [BIG]]
}
