# frozen_string_literal: true

module Margay
  module Metrics
    # Internal: the Prometheus text exposition format, version 0.0.4. Families
    # are declared once (name, type, help) and keep the order they were first
    # declared in; their samples follow their # HELP and # TYPE lines, each
    # family's together, as the format requires.
    #
    #   text = Exposition.new
    #   text.gauge("puma_running", "Threads in the pool", 5, index: 0)
    #   text.histogram("margay_queue_time_seconds", "...", { buckets: { 0.1 => 2, Float::INFINITY => 3 }, sum: 0.4, count: 3 })
    #   text.to_s
    class Exposition
      NAME = /\A[a-zA-Z_:][a-zA-Z0-9_:]*\z/
      LABEL = /\A[a-zA-Z_][a-zA-Z0-9_]*\z/

      Family = Struct.new(:name, :type, :help, :lines)

      def initialize
        @families = {}
      end

      # A gauge sample: +value+ a number (nil: no sample, the family is still declared).
      def gauge(name, help, value, labels = {})
        sample(family(name, "gauge", help), name, value, labels)
      end

      # A counter sample. The name ends in _total (the format's convention for counters).
      def counter(name, help, value, labels = {})
        raise ArgumentError, "a counter's name ends in _total: #{name}" unless name.end_with?("_total")

        sample(family(name, "counter", help), name, value, labels)
      end

      # A histogram's samples from +histogram+: { buckets: { upper bound => count, ... }
      # (cumulative), sum:, count: }. The +Inf bucket is added (the count) when missing.
      def histogram(name, help, histogram, labels = {})
        fam = family(name, "histogram", help)
        raise ArgumentError, "the label le is the histogram's own" if labels.key?(:le) || labels.key?("le")

        count = histogram.fetch(:count)
        buckets = histogram.fetch(:buckets).sort_by { |le, _| le.to_f }
        buckets << [Float::INFINITY, count] unless buckets.last && buckets.last[0].to_f.infinite?
        buckets.each { |le, n| sample(fam, "#{name}_bucket", n, labels.merge(le: le.to_f)) }
        sample(fam, "#{name}_sum", histogram.fetch(:sum), labels)
        sample(fam, "#{name}_count", count, labels)
      end

      # The text, every family that has a sample; "" when none has.
      def to_s
        @families.each_value.reject { |f| f.lines.empty? }.map do |f|
          "# HELP #{f.name} #{escape_help(f.help)}\n# TYPE #{f.name} #{f.type}\n#{f.lines.join}"
        end.join
      end

      # A number as the format writes it: integers as they are, floats as Go's
      # ParseFloat reads them, +Inf, -Inf and NaN by those names.
      def self.number(value)
        case value
        when Integer then value.to_s
        when Float
          return "NaN" if value.nan?
          return value.positive? ? "+Inf" : "-Inf" if value.infinite?

          value.to_s
        else raise ArgumentError, "not a number: #{value.inspect}"
        end
      end

      # A label value as the format quotes it: backslash, double quote and line feed escaped.
      def self.escape_label(value)
        value.to_s.gsub(/[\\"\n]/, "\\" => "\\\\", '"' => '\\"', "\n" => "\\n")
      end

      private

      def family(name, type, help)
        raise ArgumentError, "not a metric name: #{name.inspect}" unless NAME.match?(name)

        fam = (@families[name] ||= Family.new(name, type, help, []))
        raise ArgumentError, "#{name} is a #{fam.type}, not a #{type}" unless fam.type == type

        fam
      end

      def sample(fam, name, value, labels)
        return if value.nil?

        fam.lines << "#{name}#{label_set(labels)} #{Exposition.number(value)}\n"
      end

      def label_set(labels)
        return "" if labels.empty?

        pairs = labels.map do |key, value|
          key = key.to_s
          raise ArgumentError, "not a label name: #{key.inspect}" unless LABEL.match?(key) && !key.start_with?("__")

          %(#{key}="#{value.is_a?(Float) ? Exposition.number(value) : Exposition.escape_label(value)}")
        end
        "{#{pairs.join(',')}}"
      end

      # HELP text escapes backslash and line feed only.
      def escape_help(text)
        text.gsub(/[\\\n]/, "\\" => "\\\\", "\n" => "\\n")
      end
    end
  end
end
