# frozen_string_literal: true

require "test_helper"
require "etc"
require "fileutils"
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
      assert_equal "#{path}:1: header_timeout must be a positive number, got -1", error.message
    end
  end

  # A value Configuration rejects later is reported at the line that set it.
  def test_value_errors_name_the_file_and_line
    {
      "port 3000\nthreads 8, 2\n" => [2, /threads must be MIN:MAX with 0 <= MIN <= MAX/],
      "workers 2\n\nbind 'tcp://127.0.0.1:1'\nbind 'tcp://127.0.0.1:70000'\n" => [4, /port 70000 is not in 0\.\.65535/],
      "bind 'unix:///tmp/x.sock?umask=9'\n" => [1, /umask must be an octal mode/],
      "# comment\nworker_culling_strategy :newest\n" => [2, /worker_culling_strategy must be :youngest or :oldest/],
      "x = 1\nevent_backend :kqueue\n" => [2, /event_backend must be/],
      "\n\n\nlowlevel_error_handler 5\n" => [4, /needs an object with #call/],
      "activate_control_app 'http://x'\n" => [1, /invalid bind "http:\/\/x"/]
    }.each do |source, (line, pattern)|
      with_config_file(source) do |path|
        error = assert_raises(Margay::ConfigError, source) { Sources.new(path, env: {}).configuration }
        assert error.message.start_with?("#{path}:#{line}: "), "#{source.inspect}: #{error.message}"
        assert_match pattern, error.message
      end
    end
  end

  # A flag's mistake is the flag's, not the file's.
  def test_an_override_mistake_does_not_blame_the_file
    with_config_file("max_threads 4\n") do |path|
      error = assert_raises(Margay::ConfigError) { Sources.new(path, env: {}).with(max_threads: 0) }
      assert_equal "max_threads must be a positive integer, got 0", error.message
    end
  end

  # Puma's thread and timeout variables count under Margay too.
  def test_pumas_environment_variables
    config = Sources.new(nil, env: { "PUMA_MAX_THREADS" => "7", "MIN_THREADS" => "2", "PUMA_PERSISTENT_TIMEOUT" => "9" })
                    .configuration
    assert_equal [2, 7, 9], [config.min_threads, config.max_threads, config.keepalive_timeout]
    error = assert_raises(Margay::ConfigError) { Sources.new(nil, env: { "MAX_THREADS" => "lots" }).configuration }
    assert_equal 'MAX_THREADS="lots": expected an integer', error.message
  end

  # Without -C: config/margay.rb, then Puma's config/puma/ENV.rb, then
  # config/puma.rb, the first that exists; --no-config: none.
  def test_default_config_files_in_order
    Dir.mktmpdir do |dir|
      Dir.chdir(dir) do
        FileUtils.mkdir_p("config/puma")
        env = { "RACK_ENV" => "production" }
        assert_nil Sources.config_path(nil, env: env)
        File.write("config/puma.rb", "")
        assert_equal "config/puma.rb", Sources.config_path(nil, env: env)
        File.write("config/puma/production.rb", "")
        assert_equal "config/puma/production.rb", Sources.config_path(nil, env: env)
        assert_equal "config/puma.rb", Sources.config_path(nil, env: {}), "development: no config/puma/development.rb"
        assert_equal "config/puma.rb", Sources.config_path(nil, environment: "staging", env: env), "-e wins over RACK_ENV"
        assert_equal "config/puma/production.rb", Sources.config_path(nil, env: { "APP_ENV" => "production", "RACK_ENV" => "x" })
        File.write("config/margay.rb", "")
        assert_equal "config/margay.rb", Sources.config_path(nil, env: env)
        assert_nil Sources.config_path(nil, no_config: true, env: env)
        assert_nil Sources.config_path("-", env: env), "Puma's -C - : no config file"
      end
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
