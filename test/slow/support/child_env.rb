# frozen_string_literal: true

require "json"
require "open3"
require "rbconfig"
require "tmpdir"

# What a slow test needs to start a child that must not inherit this test run's
# bundle (the benchmarks' scripts, Puma from bench/Gemfile): an environment
# without what `bundle exec` (rake test:slow) put into it, whether a command is
# on PATH, whether the bench bundle is installed, and a benchmark script's smoke run.
module ChildEnv
  BENCH_GEMFILE = File.expand_path("../../../bench/Gemfile", __dir__)

  # Our environment without what `bundle exec` put into it.
  def clean_env
    env = ENV.to_h.reject { |k, _| k.start_with?("BUNDLE_", "BUNDLER_") && k != "BUNDLE_SILENCE_ROOT_WARNING" }
    env["RUBYOPT"] = env["RUBYOPT"].to_s.split.reject { |a| a.include?("bundler/setup") }.join(" ")
    env.delete("RUBYOPT") if env["RUBYOPT"].empty?
    env
  end

  # Whether +cmd+ is an executable file in a PATH directory.
  def executable_in_path?(cmd)
    ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).any? do |d|
      path = File.join(d, cmd)
      File.file?(path) && File.executable?(path)
    end
  end

  # Runs bench/NAME.rb with +args+ from the project root, its results in a temp dir; asserts
  # it exited 0 and returns its output and the results file it wrote (PREFIX-*.json).
  def run_bench(name, *args, prefix: name)
    root = File.dirname(BENCH_GEMFILE, 2)
    Dir.mktmpdir("margay-#{name}-smoke-") do |dir|
      out, status = Open3.capture2e(RbConfig.ruby, File.join(root, "bench", "#{name}.rb"), *args, "--results-dir", dir,
                                    chdir: root)
      assert status.success?, "bench/#{name}.rb #{args.join(' ')} exited #{status.exitstatus}:\n#{out}"
      [out, JSON.parse(File.read(Dir[File.join(dir, "#{prefix}-*.json")].first))]
    end
  end

  # Whether `bundle install --gemfile bench/Gemfile` has been run.
  def bench_bundle?
    system(clean_env.merge("BUNDLE_GEMFILE" => BENCH_GEMFILE), "bundle", "check",
           chdir: File.dirname(BENCH_GEMFILE, 2), unsetenv_others: true, %i[out err] => File::NULL)
  end
end
