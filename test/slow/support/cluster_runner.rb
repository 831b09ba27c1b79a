# frozen_string_literal: true

# Runs a Margay cluster for the integration tests: ruby cluster_runner.rb WORKERS [SETTINGS_JSON]
# Logs go to stdout (the tests read "booted" lines from it).
$LOAD_PATH.unshift File.expand_path("../../../lib", __dir__)
require "json"
require "margay"
require "margay/cluster"

$stdout.sync = true
settings = JSON.parse(ARGV[1] || "{}", symbolize_names: true)
config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], workers: Integer(ARGV[0]), **settings)
app = lambda do |env|
  case env["PATH_INFO"]
  when "/slow"
    puts "slow request in #{Process.pid}"
    sleep 5
  when "/pid" then return [200, {}, [Process.pid.to_s]]
  end
  body = env["rack.input"].read
  [200, { "content-type" => "text/plain" }, ["#{body.bytesize}"]]
end
log = Margay::Log.new(out: $stdout, err: $stdout)
cluster = Margay::Cluster.new(config, log: log, app_loader: -> { app }, restart_argv: [__FILE__, *ARGV])
cluster.bind
puts "listening #{cluster.addresses.join(' ')}"
cluster.run
puts "master exited"
