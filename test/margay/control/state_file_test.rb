# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "yaml"
require "margay/control/state_file"

# The state file pumactl -S reads (Margay::Control::StateFile).
class StateFileTest < Minitest::Test
  def setup
    @dir = Dir.mktmpdir("margay-state-")
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  def test_state_file_is_pumas_yaml_and_removed_only_while_ours
    path = File.join(@dir, "puma.state")
    state = Margay::Control::StateFile.new(path)
    state.write(control_url: "tcp://127.0.0.1:9293", token: "abc")
    data = YAML.safe_load(File.read(path))
    assert_equal({ "pid" => Process.pid, "control_url" => "tcp://127.0.0.1:9293", "control_auth_token" => "abc",
                   "running_from" => Dir.pwd }, data)
    state.remove
    refute File.exist?(path)
    state.write(control_url: nil, token: nil)
    assert_equal %w[pid running_from], YAML.safe_load(File.read(path)).keys
    File.write(path, "---\npid: 1\n") # a newer process owns it now
    state.remove
    assert File.exist?(path), "another process's state file stays"
  end

  def test_an_unwritable_path_is_a_config_error
    error = assert_raises(Margay::ConfigError) do
      Margay::Control::StateFile.new(File.join(@dir, "no/such/dir/state")).write(control_url: nil, token: nil)
    end
    assert_match(/cannot write state file/, error.message)
  end
end
