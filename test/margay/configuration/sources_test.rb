# frozen_string_literal: true

require "test_helper"
require "etc"
require "tmpdir"
require "margay/configuration/sources"

# The config file, WEB_CONCURRENCY and the caller's overrides become one
# Configuration, the same way for the CLI and the rackup handler.
class SourcesTest < Minitest::Test
  include Margay::TestHelper

  Sources = Margay::Configuration::Sources

  def test_defaults_without_a_file_or_environment
    config = Sources.new(nil, env: {}).configuration
    assert_equal Margay::Configuration.new.to_h, config.to_h
  end

  def test_web_concurrency_sets_workers_unless_the_file_or_an_override_does
    assert_equal 2, Sources.new(nil, env: { "WEB_CONCURRENCY" => "2" }).configuration.workers
    assert_equal Etc.nprocessors, Sources.new(nil, env: { "WEB_CONCURRENCY" => "auto" }).configuration.workers
    assert_equal 0, Sources.new(nil, env: { "WEB_CONCURRENCY" => "" }).configuration.workers
    with_config_file("workers 3\n") do |path|
      assert_equal 3, Sources.new(path, env: { "WEB_CONCURRENCY" => "2" }).configuration.workers, "the file wins"
    end
    sources = Sources.new(nil, env: { "WEB_CONCURRENCY" => "2" })
    assert_equal 4, sources.configuration.with(workers: 4).workers, "an override wins"
    error = assert_raises(Margay::ConfigError) { Sources.new(nil, env: { "WEB_CONCURRENCY" => "many" }).configuration }
    assert_equal 'WEB_CONCURRENCY="many": expected a number or auto', error.message
  end

  def test_file_settings_and_their_mistakes_name_the_file
    with_config_file("max_threads 9\nbind 'tcp://127.0.0.1:1'\n") do |path|
      sources = Sources.new(path, env: {})
      assert_equal({ max_threads: 9, binds: ["tcp://127.0.0.1:1"] }, sources.file_settings)
      assert_equal 9, sources.configuration.max_threads
    end
    with_config_file("header_timeout(-1)\n") do |path|
      error = assert_raises(Margay::ConfigError) { Sources.new(path, env: {}).configuration }
      assert_equal "#{path}: header_timeout must be a positive number, got -1", error.message
    end
  end

  def test_config_path
    Dir.mktmpdir do |dir|
      Dir.chdir(dir) do
        assert_nil Sources.config_path(nil), "no config/margay.rb: no file"
        Dir.mkdir("config")
        File.write(Sources::DEFAULT_PATH, "")
        assert_equal "config/margay.rb", Sources.config_path(nil)
        assert_equal "config/margay.rb", Sources.config_path("config/margay.rb")
        error = assert_raises(Margay::ConfigError) { Sources.config_path("other.rb") }
        assert_equal "config file other.rb not found", error.message
      end
    end
  end

  def test_parse_threads
    assert_equal [0, 16], Sources.parse_threads("0:16")
    assert_equal [3, 3], Sources.parse_threads(3)
    assert_raises(Margay::ConfigError) { Sources.parse_threads("1:") }
    assert_raises(Margay::ConfigError) { Sources.parse_threads(nil) }
  end
end
