# frozen_string_literal: true

module MargayBench
  # Markdown pieces the reports of bench/run.rb and bench/waiting.rb share.
  module ReportLines
    module_function

    # Appends a "Failures" section to +lines+: one line per failure with its server, where it
    # happened (the block gives the parts for a failure; nil parts are left out) and the first
    # line of its error. Nothing when +failures+ is empty.
    def failures(lines, failures)
      return if failures.empty?

      lines << "" << "#### Failures" << ""
      failures.each do |f|
        lines << "- #{f['server']} (#{yield(f).compact.join(', ')}): #{f['error'].to_s.lines.first&.strip}"
      end
    end
  end
end
