# frozen_string_literal: true

require_relative "../../support/processes"

# A child process whose stdout and stderr a slow test reads: spawn it, wait for
# a line of its output, wait for its exit. Sets @pid and @output (the output read
# by the last #wait_for_line or #wait_exit) in the including test.
module ChildOutput
  # Spawn +cmd+ with +env+ in +chdir+, its output collected (+options+ go to
  # Process.spawn, e.g. err: File::NULL); returns the pid.
  def spawn_child(env, *cmd, chdir:, **options)
    @output = +""
    @child = Margay::TestProcess.new(env, *cmd, chdir: chdir, **options).start
    @pid = @child.pid
  end

  # Wait until the child's output matches +pattern+; returns the match.
  def wait_for_line(pattern, timeout: 60)
    found = @child.wait_for(pattern, timeout: timeout)
    @output.replace(@child.output)
    flunk "the child exited before printing #{pattern.inspect}; output:\n#{@output}" if !found && @child.exited?
    flunk "no line matching #{pattern.inspect} within #{timeout}s; output:\n#{@output}" unless found
    @output.match(pattern)
  end

  # Wait for the child to exit; returns its Process::Status, with the rest of its output read.
  def wait_exit(timeout: 30)
    status = @child.wait_exit(timeout: timeout)
    @output.replace(@child.output)
    flunk "the child did not exit within #{timeout}s; output:\n#{@output}" unless status
    @pid = nil
    status
  end

  # For teardown: kill the child if it still runs.
  def kill_child
    @child&.kill
  end
end
