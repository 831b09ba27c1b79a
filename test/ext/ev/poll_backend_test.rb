# frozen_string_literal: true

require "test_helper"
require "open3"
require "rbconfig"
require "shellwords"
require "tmpdir"

# The poll backend's own checks, in C (test/ext/ev/poll_reuse.c): poll(2) is scripted there, so
# the moment between the leader's poll and its look at the results is exact, which no test over
# real sockets can arrange.
class PollBackendTest < Minitest::Test
  EXT = File.expand_path("../../../ext/margay", __dir__)
  SOURCE = File.expand_path("poll_reuse.c", __dir__)

  def test_events_of_a_closed_socket_never_reach_the_connection_reusing_its_number
    Dir.mktmpdir("margay-poll-") do |dir|
      exe = File.join(dir, "poll_reuse")
      cc = Shellwords.split(RbConfig::CONFIG["CC"].to_s)
      cc = ["cc"] if cc.empty?
      compile = [*cc, "-std=gnu11", "-D_GNU_SOURCE=1", "-U_FORTIFY_SOURCE", "-Wall", "-Wextra", "-Werror",
                 "-I#{EXT}", SOURCE, "-o", exe, "-pthread"]
      out, status = Open3.capture2e(*compile)
      assert status.success?, "compiling #{SOURCE} failed:\n#{out}"
      out, status = Open3.capture2e(exe)
      assert status.success?, out
      assert_equal "ok\n", out
    end
  end
end
