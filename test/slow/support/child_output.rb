# frozen_string_literal: true

require "timeout"

# A child process whose stdout and stderr a slow test reads line by line:
# spawn it, wait for a line of its output, wait for its exit. Expects @pid,
# @out_r and @output in the including test (set by #spawn_child).
module ChildOutput
  # Spawn +cmd+ with +env+ in +chdir+, its output on a pipe; returns the pid.
  def spawn_child(env, *cmd, chdir:)
    @output = +""
    @out_r, out_w = IO.pipe
    @pid = Process.spawn(env, *cmd, chdir: chdir, out: out_w, err: out_w)
  ensure
    out_w&.close
  end

  # Read the child's output until it matches +pattern+; returns the match.
  def wait_for_line(pattern, timeout: 60)
    deadline = Margay::Clock.now + timeout
    until (match = @output.match(pattern))
      left = deadline - Margay::Clock.now
      flunk "no line matching #{pattern.inspect} within #{timeout}s; output:\n#{@output}" if left <= 0
      next unless @out_r.wait_readable(left)

      chunk = @out_r.read_nonblock(4096, exception: false)
      flunk "the child exited before printing #{pattern.inspect}; output:\n#{@output}" if chunk.nil?
      @output << chunk if chunk.is_a?(String)
    end
    match
  end

  # Wait for the child to exit; returns its Process::Status, with the rest of its output read.
  def wait_exit(timeout: 30)
    _, status = Timeout.timeout(timeout) { Process.wait2(@pid) }
    @pid = nil
    @output << @out_r.read # the writer is gone: reads to EOF
    status
  rescue Timeout::Error
    flunk "the child did not exit within #{timeout}s; output:\n#{@output}"
  end
end
