# frozen_string_literal: true

# The summary statistics of every bench script, defined once (docs/BENCHMARKS.md,
# "Statistics"). Plain Ruby, no dependencies: the load generators that run as their own
# processes (slow_clients.rb, lib/arrival.rb) require it too.
module MargayBench
  module Stats
    module_function

    # Nearest-rank percentile of an ascending array: the smallest value with at least
    # +pct+ % of the values at or below it, i.e. sorted[ceil(pct/100 * n) - 1] (p0: the
    # first value). Always one of the measured values, never interpolated. nil when empty.
    def percentile(sorted, pct)
      return nil if sorted.empty?

      sorted[[(pct / 100.0 * sorted.size).ceil - 1, 0].max]
    end

    # Median of the non-nil values: the middle one, or the mean of the two middle ones
    # when their count is even (so a median of rounds or repeats needs no sorted input and
    # is not biased up or down). nil when there is none.
    def median(values)
      v = values.compact.sort
      return nil if v.empty?

      v.size.odd? ? v[v.size / 2] : (v[v.size / 2 - 1] + v[v.size / 2]) / 2.0
    end

    # A latency in milliseconds as the progress lines and core-latest.md show it.
    def ms(v)
      return "-" if v.nil?

      v >= 100 ? format("%.0f ms", v) : format("%.2f ms", v)
    end

    # Arithmetic mean (a Float); nil when empty.
    def mean(values)
      values.empty? ? nil : values.sum.fdiv(values.size)
    end
  end
end
