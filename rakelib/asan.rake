# frozen_string_literal: true

require "fileutils"
require "rbconfig"

namespace :test do
  desc "Run the fast suite (or TEST=file) against an ASan+UBSan build of the extension (built in tmp/asan)"
  task :asan do
    root = File.expand_path("..", __dir__)
    build = File.join(root, "tmp/asan/build")
    lib = File.join(root, "tmp/asan/lib")
    FileUtils.rm_rf(File.join(root, "tmp/asan"))
    FileUtils.mkdir_p([build, File.join(lib, "margay")])
    Dir.chdir(build) do
      sh({ "MARGAY_SANITIZE" => "1" }, RbConfig.ruby, File.join(root, "ext/margay/extconf.rb"))
      sh "make -j2 >/dev/null"
    end
    FileUtils.cp(File.join(build, "margay_native.so"), File.join(lib, "margay"))
    runtime = %w[libasan.so libubsan.so].map { |l| `gcc -print-file-name=#{l}`.strip }.join(":")
    env = {
      "LD_PRELOAD" => runtime,
      # Ruby itself is not built with ASan: its allocations look like leaks, and
      # its threads install their own alternate signal stacks.
      "ASAN_OPTIONS" => "detect_leaks=0:abort_on_error=1:use_sigaltstack=0",
      "UBSAN_OPTIONS" => "print_stacktrace=1:halt_on_error=1"
    }
    # The fast suite's files (the Rakefile's :test task): every test outside test/slow/; or TEST's
    # (a file or a glob), as for rake test.
    files = ENV["TEST"] ? FileList[ENV["TEST"]] : FileList["test/**/*_test.rb"] - FileList["test/slow/**/*_test.rb"]
    files = files.map { |f| "require './#{f}';" }.join
    sh env, RbConfig.ruby, "-w", "-I#{lib}", "-Ilib", "-Itest", "-e", files
  end
end
