# frozen_string_literal: true

require "test_helper"
require "margay/configuration"
require "margay/process/bundler_prune"

# Margay::BundlerPrune: when the launcher re-executes without Bundler, what it puts on the
# command line, and what it says when the setting does not apply. (The re-execution itself,
# the worker's bundle and a hot restart: test/slow/cluster/prune_bundler_test.rb.)
class BundlerPruneTest < Minitest::Test
  P = Margay::BundlerPrune

  def config(**settings)
    Margay::Configuration.new(workers: 2, **settings)
  end

  def with_rubyopt(value)
    saved = ENV["RUBYOPT"]
    ENV["RUBYOPT"] = value
    yield
  ensure
    ENV["RUBYOPT"] = saved
  end

  def test_off_by_default_and_nothing_to_say
    refute config.prune_bundler
    assert_nil P.reexec(config, ["margay"], cluster: true)
  end

  def test_where_the_app_is_loaded_in_the_process_it_is_ignored_with_a_warning
    assert_match(/single mode/, P.reexec(config(prune_bundler: true), ["margay"], cluster: false))
    assert_match(/the master loads the app \(preload_app\)/, P.reexec(config(prune_bundler: true), ["margay"], cluster: true))
  end

  def test_not_under_bundler_nothing_to_prune
    with_rubyopt("-W0") do
      assert_nil P.reexec(config(prune_bundler: true, mold_boot: true), ["margay"], cluster: true)
    end
  end

  def test_rubyopt_bundler_setup_is_found_and_the_other_switches_kept
    with_rubyopt("-W0 -r/gems/bundler-2.3.15/lib/bundler/setup --jit") do
      assert_equal "/gems/bundler-2.3.15/lib/bundler/setup", P.rubyopt_setup
      assert_equal %w[-W0 --jit], P.rubyopt_rest
    end
    with_rubyopt("-rjson") { assert_nil P.rubyopt_setup }
  end

  def test_the_load_path_is_margay_lib_and_rack_from_this_process
    dirs = P.load_path
    assert_equal File.expand_path("../../../lib", __dir__), dirs.first
    assert(dirs.any? { |dir| File.file?(File.join(dir, "rack/builder.rb")) }, dirs.inspect)
    assert File.file?(P::EXE)
  end

  # A default gem the bundle has at another version than Ruby's (base64 in Margay's own bundle)
  # is on the master's command line: what the master requires of it is the bundle's version.
  def test_the_bundle_versions_of_default_gems_are_on_the_load_path
    defaults = Gem::Specification.default_stubs.map(&:name)
    bundled = Gem.loaded_specs.values.reject(&:default_gem?).select { |spec| defaults.include?(spec.name) }
    skip "no default gem at another version in this bundle" if bundled.empty?
    bundled.each { |spec| assert_includes P.load_path, spec.full_require_paths.first, spec.full_name }
  end
end
