# frozen_string_literal: true

require "test_helper"
require "margay/process/lean_heap"

# Margay::LeanHeap: what the launcher puts into the environment for `lean_heap`, and when it
# must re-execute for Ruby to read it. (The re-execution itself, and the workers:
# test/slow/cluster/lean_heap_test.rb.)
class LeanHeapUnitTest < Minitest::Test
  L = Margay::LeanHeap

  def setup
    @saved = L::RATIOS.keys.to_h { |name| [name, ENV.delete(name)] }
  end

  def teardown
    @saved.each { |name, value| value ? ENV[name] = value : ENV.delete(name) }
  end

  def test_off_leaves_the_environment_alone
    assert_nil L.prepare(false)
    assert_equal [nil, nil], L::RATIOS.keys.map { |name| ENV.fetch(name, nil) }
  end

  def test_on_sets_both_ratios_and_asks_for_a_reexecution
    skip "CRuby only" unless RUBY_ENGINE == "ruby"
    assert_equal :reexec, L.prepare(true)
    assert_equal %w[0.10 0.20], L::RATIOS.keys.map { |name| ENV.fetch(name) }
  end

  def test_an_operators_value_is_kept_and_the_other_added
    skip "CRuby only" unless RUBY_ENGINE == "ruby"
    ENV["RUBY_GC_HEAP_FREE_SLOTS_GOAL_RATIO"] = "0.5"
    assert_equal :reexec, L.prepare(true)
    assert_equal %w[0.10 0.5], L::RATIOS.keys.map { |name| ENV.fetch(name) }
  end

  def test_started_with_both_there_is_nothing_to_do
    skip "CRuby only" unless RUBY_ENGINE == "ruby"
    L::RATIOS.each { |name, value| ENV[name] = value }
    assert_nil L.prepare(true), "this Ruby read them as it started: no re-execution"
  end

  def test_without_a_command_line_it_says_what_to_set
    assert_equal "lean_heap needs the margay command to re-execute itself; set RUBY_GC_HEAP_FREE_SLOTS_MIN_RATIO=0.10 " \
                 "RUBY_GC_HEAP_FREE_SLOTS_GOAL_RATIO=0.20 in its environment yourself", L.reexec(nil)
  end

  def test_other_rubies_ignore_it
    skip "not CRuby only" if RUBY_ENGINE == "ruby"
    assert_match(/lean_heap ignored on #{RUBY_ENGINE}/, L.prepare(true))
  end
end
