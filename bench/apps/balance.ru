# frozen_string_literal: true

# bench/balance.rb workload: /slow waits 500 ms, anything else 1 ms.
run lambda { |env|
  sleep(env["PATH_INFO"] == "/slow" ? 0.5 : 0.001)
  [200, { "content-type" => "text/plain", "content-length" => "2" }, ["ok"]]
}
