# frozen_string_literal: true

# bench/run.rb workload "io": 10 ms of waiting (stands in for a database or an HTTP call)
# plus a little CPU (building a ~2 KB JSON body from 50 records).
require "json"

ROWS = Array.new(50) { |i| { "id" => i, "name" => "item #{i}", "price" => i * 3 } }.freeze

run lambda { |_env|
  sleep 0.010
  body = JSON.generate(ROWS.map { |r| r.merge("total" => r["price"] * 2) })
  [200, { "content-type" => "application/json", "content-length" => body.bytesize.to_s }, [body]]
}
