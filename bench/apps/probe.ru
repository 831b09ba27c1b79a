# frozen_string_literal: true

# bench/probes.rb's app: GET /slow holds an app thread for SLOW_S (the load that saturates the
# server); GET /health is the health route people add to their app today (answered on an app
# thread, so it waits behind the load); anything else is a small 200.
SLOW_S = Float(ENV.fetch("PROBE_SLOW_S", "0.5"))

run lambda { |env|
  case env["PATH_INFO"]
  when "/slow"
    sleep SLOW_S
    [200, { "content-type" => "text/plain", "content-length" => "4" }, ["slow"]]
  when "/health"
    [200, { "content-type" => "text/plain", "content-length" => "2" }, ["ok"]]
  else
    [200, { "content-type" => "text/plain", "content-length" => "5" }, ["hello"]]
  end
}
