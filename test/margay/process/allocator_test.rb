# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "open3"
require "margay/native"
require "margay/process/allocator"

# Margay::Allocator: which allocator this process runs on, the library the jemalloc setting
# names, and what the launcher is told when it cannot re-execute on it. (The re-execution
# itself: test/slow/single/jemalloc_test.rb.)
class AllocatorTest < Minitest::Test
  include Margay::TestHelper

  A = Margay::Allocator

  def test_this_test_process_runs_on_malloc_unless_built_or_started_with_jemalloc
    expected = ENV["LD_PRELOAD"].to_s.include?("jemalloc") || RbConfig::CONFIG["MAINLIBS"].to_s.include?("jemalloc")
    assert_equal expected ? "jemalloc" : "malloc", A.name
  end

  def test_library_is_the_path_given_when_it_is_a_file
    Dir.mktmpdir do |dir|
      lib = File.join(dir, "libjemalloc.so.2")
      File.write(lib, "")
      assert_equal lib, A.library(lib)
      assert_nil A.library(File.join(dir, "missing.so"))
      assert_nil A.library(dir), "a directory is not a library"
    end
  end

  def test_library_true_is_the_first_installed_one
    installed = A::SEARCH.find { |path| File.file?(path) }
    installed ? assert_equal(installed, A.library(true)) : assert_nil(A.library(true))
  end

  def test_jruby_ignores_it
    skip "JRuby only" unless RUBY_ENGINE == "jruby"
    assert_equal "jemalloc ignored on JRuby (the JVM manages its own heap)", A.reexec(true, %w[exe/margay])
  end

  def test_nothing_to_do_when_not_asked
    assert_nil A.reexec(false, %w[exe/margay])
    assert_nil A.reexec(nil, %w[exe/margay])
  end

  def test_a_missing_library_is_one_line_and_malloc
    skip_on_jruby "the JVM manages its own heap (test_jruby_ignores_it)"
    skip "this process runs on jemalloc" if A.name == "jemalloc"
    warning = A.reexec("/nonexistent/libjemalloc.so.2", %w[exe/margay])
    assert_equal "jemalloc: no library at /nonexistent/libjemalloc.so.2 (Debian: apt-get install libjemalloc2); " \
                 "serving on malloc", warning
  end

  def test_a_preload_that_did_not_take_is_reported_not_retried
    skip_on_jruby "the JVM manages its own heap (test_jruby_ignores_it)"
    skip "this process runs on jemalloc" if A.name == "jemalloc"
    with_env(A::REEXEC_ENV => "1", "LD_PRELOAD" => "/x/libjemalloc.so.2") do
      assert_equal "jemalloc: LD_PRELOAD=/x/libjemalloc.so.2 did not take effect; serving on malloc", A.reexec(true, %w[x])
      assert_nil ENV.fetch(A::REEXEC_ENV, nil), "the mark is the one re-execution's only"
    end
  end

  def test_without_a_command_line_it_says_how_to_preload
    skip_on_jruby "the JVM manages its own heap (test_jruby_ignores_it)"
    skip "this process runs on jemalloc" if A.name == "jemalloc"
    Dir.mktmpdir do |dir|
      lib = File.join(dir, "libjemalloc.so.2")
      File.write(lib, "")
      assert_equal "jemalloc needs the margay command to re-execute itself; preload it yourself: LD_PRELOAD=#{lib}",
                   A.reexec(lib, nil)
    end
  end

  # Native.malloc_arenas (the Launcher calls it with max_threads + 3): each of six threads
  # gets an arena of its own when the limit allows, never the main arena, which after a
  # fork holds the template's heap. Counted in a fresh process (glibc fixes the limit once)
  # by glibc's own malloc_stats, which prints one "Arena N:" block per arena to stderr.
  ARENA_COUNT = <<~RUBY
    require "fiddle"
    require "margay/native"
    print Margay::Native.malloc_arenas(Integer(ARGV[0])), " "
    q = Queue.new
    threads = Array.new(6) { Thread.new { s = "x" * 4096; q.pop; s.size } }
    sleep 0.2 until threads.all? { |t| t.status == "sleep" }
    $stderr.flush
    Fiddle::Function.new(Fiddle::Handle::DEFAULT["malloc_stats"], [], Fiddle::TYPE_VOID).call
    6.times { q << 1 }
    threads.each(&:join)
  RUBY

  def test_malloc_arenas_gives_each_thread_its_own_unless_malloc_arena_max_is_set
    skip "glibc only" unless RUBY_PLATFORM.include?("linux-gnu")
    skip "a preloaded allocator (ASan's, jemalloc) replaces glibc's arenas" unless ENV["LD_PRELOAD"].to_s.empty?
    run = lambda do |limit, env = {}|
      out, err, status = Open3.capture3(env, RbConfig.ruby, "-I", File.expand_path("../../../lib", __dir__), "-e", ARENA_COUNT, limit.to_s)
      assert status.success?, err
      [out.strip, (err.scan(/^Arena \d+:$/).size - 1).to_s] # the arenas besides the main one
    end
    on, arenas = run.call(9)
    assert_equal "true", on
    # six threads, six arenas besides the main one; Ruby's own timer thread may take one more,
    # and the limit bounds them all
    assert_includes 6..8, arenas.to_i, "arenas besides the main one, six threads and a limit of nine"
    assert_equal %w[true 2], run.call(3), "a limit of three: the main arena and two more, shared"
    assert_equal %w[false 1], run.call(9, "MALLOC_ARENA_MAX" => "2"), "the environment's choice stands"
    assert_raises(ArgumentError) { Margay::Native.malloc_arenas(0) }
  end
end
