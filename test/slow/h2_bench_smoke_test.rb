# frozen_string_literal: true

require "test_helper"
require_relative "support/child_env"
require "margay/native"

# Smoke test of bench/h2.rb: one short round of each server (Margay over TLS with ALPN h2, h2c
# and TLS HTTP/1.1; nginx, Itsi and Falcon over TLS and h2c) runs end to end under h2load and
# writes its rows, each speaking the protocol it is there for; a server that cannot run here is
# skipped with its reason, never silently. It never asserts a speed figure.
class H2BenchSmokeTest < Minitest::Test
  include ChildEnv

  SERVERS = %w[margay-h2 margay-h1 nginx-h2 itsi-h2 falcon-h2 margay-h2c nginx-h2c itsi-h2c falcon-h2c].freeze

  def test_one_round_of_each_server_over_h2_and_h2c
    %w[h2load openssl].each { |cmd| skip "#{cmd} is not installed" unless executable_in_path?(cmd) }
    skip "built without libnghttp2" unless Margay::Native::H2
    skip "built without OpenSSL" unless Margay::Native::TLS
    out, result = run_bench("h2", "--rounds", "1", "--seconds", "1", "--keys", "ecdsa", "--connections", "8",
                            "--streams", "10")
    skipped = result["skipped"]
    skipped.each { |server, why| assert_includes out, "skipping #{server}: #{why}" }
    assert_empty skipped.keys.grep(/\Amargay/), "Margay itself was skipped:\n#{out}"
    assert_equal SERVERS - skipped.keys, result["rows"].map { |r| r["server"] }
    result["rows"].each do |row|
      assert_nil row["error"], "#{row['server']} failed:\n#{out}"
      assert_operator row["rps"], :>, 0, "#{row['server']} served nothing:\n#{out}"
      assert_equal row["server"] == "margay-h1" ? "http/1.1" : row["server"][/h2c?\z/], row["protocol"]
    end
    assert_match(/margay-h2 ecdsa -m10 vs margay-h1: /, out)
    assert_match(/margay-h2c none -m10 vs margay-h1 \(ecdsa\): /, out)
  end
end
