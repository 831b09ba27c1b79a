# frozen_string_literal: true

require "test_helper"
require "margay/metrics"
require_relative "../../support/promtool"

# The text exposition format (Metrics::Exposition), checked by Prometheus's own parser.
class MetricsExpositionTest < Minitest::Test
  include Margay::Promtool

  Exposition = Margay::Metrics::Exposition

  def test_families_keep_their_samples_together_with_help_and_type
    text = Exposition.new
    text.gauge("a_things", "first", 1, index: 0)
    text.counter("b_total", "second", 2, index: 0)
    text.gauge("a_things", "first", 3, index: 1)
    text.gauge("no_things", "no sample", nil)
    assert_equal <<~TEXT, text.to_s
      # HELP a_things first
      # TYPE a_things gauge
      a_things{index="0"} 1
      a_things{index="1"} 3
      # HELP b_total second
      # TYPE b_total counter
      b_total{index="0"} 2
    TEXT
    assert_promtool_accepts(text.to_s)
  end

  def test_label_values_and_help_are_escaped
    skip_on_jruby "promtool's output is read through Open3 with stdin_data, which comes back empty on JRuby"
    value = %(C:\\dir "quoted"\nnext line ünïcode)
    text = Exposition.new
    text.gauge("margay_info", "a \\ backslash\nand a line feed", 1, version: value)
    lines = text.to_s.lines
    assert_equal %(# HELP margay_info a \\\\ backslash\\nand a line feed\n), lines[0]
    assert_equal %(margay_info{version="C:\\\\dir \\"quoted\\"\\nnext line ünïcode"} 1\n), lines[2]
    assert_promtool_accepts(text.to_s)
    out, = Open3.capture2e("promtool", "check", "metrics", "--extended", stdin_data: text.to_s)
    assert_match(/margay_info\s+1\b/, out, "one series, its label read whole")
  end

  def test_histogram_buckets_sorted_cumulative_with_inf_sum_and_count
    text = Exposition.new
    text.histogram("margay_queue_time_seconds", "queue", { buckets: { 0.1 => 3, 0.005 => 1, 1 => 4 }, sum: 0.75, count: 5 },
                   index: 2)
    assert_equal <<~TEXT, text.to_s
      # HELP margay_queue_time_seconds queue
      # TYPE margay_queue_time_seconds histogram
      margay_queue_time_seconds_bucket{index="2",le="0.005"} 1
      margay_queue_time_seconds_bucket{index="2",le="0.1"} 3
      margay_queue_time_seconds_bucket{index="2",le="1.0"} 4
      margay_queue_time_seconds_bucket{index="2",le="+Inf"} 5
      margay_queue_time_seconds_sum{index="2"} 0.75
      margay_queue_time_seconds_count{index="2"} 5
    TEXT
    given_inf = Exposition.new
    given_inf.histogram("h_seconds", "h", { buckets: { Float::INFINITY => 2, 0.5 => 1 }, sum: 1, count: 2 })
    assert_equal 1, given_inf.to_s.scan('le="+Inf"').size, "a given +Inf bucket is not added twice"
    assert_promtool_accepts(text.to_s + given_inf.to_s)
  end

  def test_numbers
    assert_equal %w[0 12 0.25 1.0e-05 +Inf -Inf NaN],
                 [0, 12, 0.25, 0.00001, Float::INFINITY, -Float::INFINITY, Float::NAN].map { |n| Exposition.number(n) }
    assert_raises(ArgumentError) { Exposition.number("1") }
  end

  def test_names_types_and_labels_are_checked
    text = Exposition.new
    assert_raises(ArgumentError) { text.gauge("bad-name", "h", 1) }
    assert_raises(ArgumentError) { text.gauge("ok", "h", 1, "bad-label": 1) }
    assert_raises(ArgumentError) { text.gauge("ok", "h", 1, __reserved: 1) }
    assert_raises(ArgumentError) { text.counter("requests", "h", 1) }
    text.gauge("ok", "h", 1)
    assert_raises(ArgumentError) { text.counter("ok_total", "h", 1).then { text.gauge("ok_total", "h", 1) } }
    assert_raises(ArgumentError) { text.histogram("ok_seconds", "h", { buckets: {}, sum: 0, count: 0 }, le: 1) }
  end
end
