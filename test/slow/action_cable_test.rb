# frozen_string_literal: true

require "test_helper"
require_relative "support/child_output"
require "json"
require "net/http"
require "open3"
require "tmpdir"
require "support/websocket_client"

# Action Cable (full hijack) end to end: the Rails fixture app
# (test/fixtures/rails_app, its EchoChannel) under `bin/rails server -u
# margay`, two real WebSocket clients (websocket-driver) subscribing, one
# speaking, both receiving the broadcast; then a graceful stop with the
# cable connections still open.
#
# The Rails bundle is not part of Margay's; install it once with
#   bundle install --gemfile test/fixtures/rails_app/Gemfile
class ActionCableTest < Minitest::Test
  include ChildOutput

  ROOT = File.expand_path("../..", __dir__)
  RAILS_APP = File.join(ROOT, "test", "fixtures", "rails_app")
  ENV_FOR_RAILS = { "RUBYOPT" => nil, "BUNDLER_SETUP" => nil, "RACK_ENV" => nil, "RAILS_ENV" => nil,
                    "BUNDLE_GEMFILE" => File.join(RAILS_APP, "Gemfile") }.freeze
  CHANNEL = { channel: "EchoChannel" }.to_json

  def setup
    _, status = Open3.capture2e(ENV_FOR_RAILS, "bundle", "check", chdir: RAILS_APP)
    skip "the Rails fixture bundle is not installed: run `bundle install --gemfile test/fixtures/rails_app/Gemfile`" \
      unless status.success?
    @clients = []
    @tmp = Dir.mktmpdir("margay-cable-")
  end

  def teardown
    @clients&.each(&:close)
    kill_child
  ensure
    FileUtils.remove_entry(@tmp) if @tmp
  end

  def test_action_cable_subscribe_and_broadcast
    port = start_rails
    alice = subscribe(port)
    bob = subscribe(port)

    alice.text({ command: "message", identifier: CHANNEL, data: { action: "speak", text: "hello" }.to_json }.to_json)
    [alice, bob].each do |client|
      message = broadcast(client)
      assert_equal({ "text" => "hello", "server" => "Margay/#{Margay::VERSION}" }, message["message"], @output)
    end

    bob.text({ command: "message", identifier: CHANNEL, data: { action: "speak", text: "wörld" }.to_json }.to_json)
    assert_equal "wörld", broadcast(alice)["message"]["text"]

    # plain requests are served meanwhile
    assert_equal "200", Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/")).code

    Process.kill("TERM", @pid)
    status = wait_exit
    assert status.success?, "rails server exited with #{status.inspect}:\n#{@output}"
  end

  private

  # A WebSocket client subscribed to EchoChannel (welcome and confirmation seen).
  def subscribe(port)
    client = Margay::WebSocketClient.new(port, "/cable", protocols: ["actioncable-v1-json"], timeout: 20)
    @clients << client
    assert client.open?, "Action Cable accepted the WebSocket:\n#{@output}"
    assert_equal 101, client.status
    assert_equal "actioncable-v1-json", client.driver.protocol
    assert_equal "welcome", next_message(client)["type"]
    client.text({ command: "subscribe", identifier: CHANNEL }.to_json)
    confirm = next_message(client)
    assert_equal %w[confirm_subscription].push(CHANNEL), confirm.values_at("type", "identifier")
    client
  end

  # The next message other than Action Cable's pings.
  def next_message(client)
    JSON.parse(client.receive_until { |m| JSON.parse(m)["type"] != "ping" })
  end

  def broadcast(client)
    message = next_message(client)
    assert_equal CHANNEL, message["identifier"], message.inspect
    message
  end

  def start_rails
    spawn_child(ENV_FOR_RAILS, "bin/rails", "server", "-u", "margay", "-b", "127.0.0.1", "-p", "0",
                "-P", File.join(@tmp, "server.pid"), chdir: RAILS_APP)
    wait_for_line(%r{Listening on tcp://127\.0\.0\.1:(\d+)})[1].to_i
  end

end
