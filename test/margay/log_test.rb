# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "open3"

# Margay::Log: Puma's log_formatter (each line), custom_logger (every line
# goes to it), and stdout_redirect (Log.redirect) with its append modes.
class LogTest < Minitest::Test
  def config(**settings)
    Margay::Configuration.new(**settings)
  end

  def test_configured_without_formatter_or_logger_is_the_same_log
    log = Margay::Log.new(out: StringIO.new)
    assert_same log, log.configured(config)
  end

  def test_log_formatter_formats_each_line
    out = StringIO.new
    log = Margay::Log.new(out: out, err: out).configured(config(log_formatter: ->(line) { "[x] #{line}" }))
    log.info("one\ntwo")
    log.warn("three")
    assert_equal "[x] one\n[x] two\n[x] WARN: three\n", out.string
  end

  def test_custom_logger_receives_every_line
    logger = StringIO.new
    out = StringIO.new
    log = Margay::Log.new(out: out, err: out).configured(config(custom_logger: logger))
    log.info("banner")
    log.error("bad")
    log.access("GET /")
    assert_equal ["banner\n", "ERROR: bad\n", "GET /\n"], logger.string.lines
    assert_empty out.string
  end

  def test_a_logger_without_write_gets_each_line_through_info
    require "logger"
    sink = StringIO.new
    logger = Logger.new(sink, formatter: ->(severity, _time, _prog, message) { "#{severity} #{message}\n" })
    _, err = capture_io do
      log = Margay::Log.new.configured(config(custom_logger: logger))
      log.info("banner")
      log.warn("careful")
    end
    assert_equal ["INFO banner\n", "INFO WARN: careful\n"], sink.string.lines
    assert_empty err, "no fallback: the Logger took every line"
  end

  def test_thread_backtraces_name_each_thread_and_its_frames
    skip_on_jruby "JRuby's backtraces open with its own Java frames"
    out = StringIO.new
    Margay::Log.new(out: out, err: out).thread_backtraces([Thread.current])
    assert_match(/\AThread: TID-#{Thread.current.object_id.to_s(36)}\n  .*log_test\.rb:\d+/m, out.string)
  end

  def test_a_raising_formatter_never_loses_the_line
    log = Margay::Log.new(out: StringIO.new).configured(config(log_formatter: ->(_) { raise "fmt down" }))
    _, err = capture_io { log.info("kept") }
    assert_match(/kept \(log_formatter\/custom_logger raised RuntimeError: fmt down\)/, err)
  end

  # A file that cannot be opened (here stderr's directory is missing): the
  # error is raised and neither stream moves; stdout used to be closed by
  # the failed IO#reopen(path) of its own, or moved alone.
  def test_redirect_that_cannot_open_a_file_moves_neither_stream
    skip_on_jruby "spawns a child Ruby, and the jruby-jars JRuby has no executable for RbConfig.ruby"
    Dir.mktmpdir do |dir|
      out = File.join(dir, "out.log")
      script = <<~RUBY
        require "margay"
        c = Margay::Configuration.new(redirect_stdout: #{out.inspect}, redirect_stderr: #{File.join(dir, "gone", "err.log").inspect})
        begin
          Margay::Log.redirect(c)
        rescue Errno::ENOENT
          puts "stdout kept"
          warn "stderr kept"
        end
      RUBY
      stdout, stderr, status = Open3.capture3(RbConfig.ruby, "-I", File.expand_path("../../lib", __dir__), "-e", script)
      assert status.success?, stderr
      assert_equal ["stdout kept\n", "stderr kept\n"], [stdout, stderr]
      assert_equal "", File.exist?(out) ? File.read(out) : ""
    end
  end

  def test_redirect_reopens_stdout_and_stderr_truncating_or_appending
    skip_on_jruby "spawns a child Ruby, and the jruby-jars JRuby has no executable for RbConfig.ruby"
    Dir.mktmpdir do |dir|
      out, err = File.join(dir, "out.log"), File.join(dir, "err.log")
      File.write(out, "before\n")
      script = <<~RUBY
        require "margay"
        c = Margay::Configuration.new(redirect_stdout: #{out.inspect}, redirect_stderr: #{err.inspect},
                                      redirect_append: ARGV[0] == "append")
        exit 2 unless Margay::Log.redirect(c)
        puts "to out"
        warn "to err"
      RUBY
      assert system(RbConfig.ruby, "-I", File.expand_path("../../lib", __dir__), "-e", script, "append")
      assert_equal "before\nto out\n", File.read(out)
      assert system(RbConfig.ruby, "-I", File.expand_path("../../lib", __dir__), "-e", script, "truncate")
      assert_equal ["to out\n", "to err\n"], [File.read(out), File.read(err)]
    end
    refute Margay::Log.redirect(config), "nothing to redirect"
  end
end
