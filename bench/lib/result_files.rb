# frozen_string_literal: true

require "fileutils"
require "json"
require "time"
require_relative "machine"

module MargayBench
  # What the single-purpose runners (queue.rb, rolling.rb, probes.rb) write: DIR/NAME-<UTC
  # time>.json (the options, the machine, the commit and every row) and .md (the Markdown,
  # also printed), and one line saying where.
  module ResultFiles
    module_function

    # +options+: the run's options (a :results_dir among them: where the files go); +head+:
    # more of the JSON's head (e.g. a baseline's commit).
    def write(name, options, rows, markdown, head: {})
      dir = options.fetch(:results_dir)
      FileUtils.mkdir_p(dir)
      base = File.join(dir, "#{name}-#{Time.now.utc.strftime('%Y%m%dT%H%M%SZ')}")
      json = { "options" => options.except(:results_dir), "machine" => Machine.describe, "commit" => Machine.commit }
      File.write("#{base}.json", JSON.pretty_generate(json.merge(head).merge("rows" => rows)))
      File.write("#{base}.md", markdown)
      puts markdown
      warn "[#{name}] wrote #{base}.json and .md"
    end
  end
end
