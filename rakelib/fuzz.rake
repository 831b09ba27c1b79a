# frozen_string_literal: true

# libFuzzer runs of the pure-C parser, chunked decoder and PROXY line parser (ext/margay/http/,
# harnesses in ext/margay/fuzz/), and of HTTP/2 frame input through the engine (core/h2.c, with
# libnghttp2: skipped without its header).
#   rake fuzz[seconds]   build into tmp/fuzz/ and fuzz each harness that long (default 60);
#                        fails when a harness finds a crash (reproducer in tmp/fuzz/artifacts/)
#   rake fuzz:seeds      rewrite ext/margay/fuzz/seeds/{head,chunked,proxy}/ from the test inputs
# Needs clang with libFuzzer (Debian: apt-get install clang-14 libclang-rt-14-dev); CLANG=... overrides.
require "fileutils"
require "rbconfig"

module MargayFuzz
  SRC = "ext/margay"
  OUT = "tmp/fuzz"
  # h2 when libnghttp2's header is there (its seeds: test/support/h2_frames.py seeds DIR).
  HARNESSES = (%w[head chunked proxy] + (File.exist?("/usr/include/nghttp2/nghttp2.h") ? %w[h2] : [])).freeze
  FLAGS = %w[-g -O1 -std=gnu11 -Wall -Wextra
             -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined].freeze
  # What the harnesses link: the pure HTTP units only (no Ruby, no engine) ...
  HTTP = %w[bytes parser chunked proxy].freeze
  # ... but h2's, which runs the engine (core/, ev/, http/: no Ruby either) with libnghttp2 and
  # the features extconf.rb finds on Linux.
  ENGINE = %w[-D_GNU_SOURCE=1 -DHAVE_SYS_EPOLL_H -DHAVE_EPOLL_CREATE1 -DHAVE_SYS_EVENTFD_H -DHAVE_EVENTFD
              -DHAVE_ACCEPT4 -DHAVE_SYS_SENDFILE_H -DHAVE_SENDFILE -DMG_HAVE_H2=1
              -Wno-missing-field-initializers].freeze

  def self.clang
    ENV.fetch("CLANG") do
      %w[clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14].find do |cc|
        system("command -v #{cc} >/dev/null 2>&1")
      end || abort("fuzz: no clang found (apt-get install clang-14 libclang-rt-14-dev)")
    end
  end

  def self.build(name)
    exe = File.join(OUT, "fuzz_#{name}")
    engine = name == "h2"
    units = engine ? Dir["#{SRC}/{core,ev,http}/*.c"].sort : HTTP.map { |unit| "#{SRC}/http/#{unit}.c" }
    sources = ["#{SRC}/fuzz/fuzz_#{name}.c"] + units
    deps = sources + units.map { |c| c.sub(/\.c\z/, ".h") }.select { |h| File.exist?(h) }
    return exe if File.exist?(exe) && deps.all? { |d| File.mtime(d) <= File.mtime(exe) }

    FileUtils.mkdir_p(OUT)
    sh clang, *FLAGS, *(engine ? ENGINE : []), "-I#{SRC}", *sources, *(engine ? %w[-lnghttp2 -lpthread] : []), "-o", exe
    exe
  end

  def self.sh(*cmd)
    puts cmd.join(" ")
    system(*cmd) || abort("fuzz: command failed: #{cmd.first}")
  end

  def self.run(name, seconds)
    exe = build(name)
    corpus = File.join(OUT, "corpus", name) # grows with what the fuzzer finds; seeds stay untouched
    artifacts = File.join(OUT, "artifacts", name)
    FileUtils.mkdir_p([corpus, artifacts])
    seeds = "#{SRC}/fuzz/seeds/#{name}"
    cmd = [exe, "-max_total_time=#{seconds}", "-print_final_stats=1", "-timeout=10", "-rss_limit_mb=2048",
           "-max_len=4096", *(name == "h2" ? [] : ["-dict=#{SRC}/fuzz/http.dict"]), "-artifact_prefix=#{artifacts}/", corpus]
    cmd << seeds if Dir.exist?(seeds)
    puts cmd.join(" ")
    return true if system(*cmd)

    warn "fuzz: fuzz_#{name} found a crash; reproducer(s) in #{artifacts}/ (run: #{exe} <file>)"
    false
  end
end

desc "Fuzz the C request parser, chunked decoder, PROXY line parser and HTTP/2 input for [seconds] each (default 60)"
task :fuzz, [:seconds] do |_t, args|
  seconds = Integer(args[:seconds] || 60)
  failed = MargayFuzz::HARNESSES.reject { |name| MargayFuzz.run(name, seconds) }
  abort("fuzz: crashes in #{failed.join(", ")}") unless failed.empty?
end

namespace :fuzz do
  desc "Build the libFuzzer harnesses into tmp/fuzz/"
  task :build do
    MargayFuzz::HARNESSES.each { |name| MargayFuzz.build(name) }
  end

  desc "Write fuzz seeds into ext/margay/fuzz/seeds/ from the tests (and test/corpus/cases.rb)"
  task seeds: :compile do
    MargayFuzz.sh(RbConfig.ruby, "-Ilib", "-Itest", "#{MargayFuzz::SRC}/fuzz/write_seeds.rb")
  end
end
