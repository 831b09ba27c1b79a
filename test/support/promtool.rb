# frozen_string_literal: true

require "open3"

module Margay
  # Test support (internal): Prometheus's own parser of the text exposition
  # format, `promtool check metrics` (Debian's `prometheus` package). It
  # parses the text from stdin (exit 1 on a parse error) and then lints it
  # (exit 3, one line per finding).
  module Promtool
    # The lint findings the metrics are allowed: Puma's names keep Puma's
    # types, and yabeda-puma-plugin exports puma_requests_count as a gauge.
    KNOWN_LINT = [%(puma_requests_count non-histogram and non-summary metrics should not have "_count" suffix)].freeze

    def promtool?
      ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).any? { |d| File.executable?(File.join(d, "promtool")) }
    end

    # Skip unless promtool is there, run it on +text+ and fail on a parse
    # error or on a lint finding outside KNOWN_LINT. Returns its findings.
    def assert_promtool_accepts(text)
      skip "promtool is not installed (apt-get install prometheus)" unless promtool?
      out, status = Open3.capture2e("promtool", "check", "metrics", stdin_data: text)
      findings = out.lines.map(&:strip).reject(&:empty?)
      assert_includes [0, 3], status.exitstatus, "promtool could not parse it:\n#{out}\n--- text ---\n#{text}"
      assert_empty findings - KNOWN_LINT, "promtool's lint:\n#{out}\n--- text ---\n#{text}"
      findings
    end
  end
end
