# frozen_string_literal: true

# Minimal SVG charts for bench/run.rb's report, written by hand (no dependencies):
# line charts (a log-scaled x axis for concurrency, linear or log y) and grouped
# horizontal bar charts. Every chart has a title, axis labels and a legend.
module MargayBench
  module Svg
    PALETTE = %w[#d62728 #1f77b4 #2ca02c #ff7f0e #9467bd #8c564b #e377c2 #17becf #7f7f7f #bcbd22].freeze
    FONT = "font-family=\"DejaVu Sans, Arial, Helvetica, sans-serif\""

    module_function

    def esc(text)
      text.to_s.gsub("&", "&amp;").gsub("<", "&lt;").gsub(">", "&gt;").gsub('"', "&quot;")
    end

    # "Nice" tick values covering 0..max.
    def ticks(max, count = 5)
      return [0, 1] if max.nil? || max <= 0

      raw = max / count.to_f
      mag = 10**Math.log10(raw).floor
      step = [1, 2, 2.5, 5, 10].map { |m| m * mag }.find { |s| s >= raw }
      (0..(max / step).ceil).map { |i| i * step }
    end

    def log_ticks(min, max)
      lo = Math.log10(min).floor
      hi = Math.log10(max).ceil
      hi = lo + 1 if hi == lo
      (lo..hi).flat_map { |e| [1, 2, 5].map { |m| m * 10.0**e } }.select { |v| v >= 10.0**lo && v <= 10.0**hi }
    end

    def fmt(v)
      return v.to_i.to_s if v == v.to_i && v.abs >= 1
      return format("%.0fk", v / 1000.0) if v >= 10_000

      v >= 1 ? format("%g", v.round(1)) : format("%g", v.round(3))
    end

    # series: [{ name:, points: [[x, y], ...], dash: bool }]; x values are plotted on a
    # log2 scale at their own positions (the concurrency levels).
    def line_chart(title:, xlabel:, ylabel:, series:, ylog: false, width: 760, height: 440)
      ml = 78
      mr = 170
      mt = 46
      mb = 58
      pw = width - ml - mr
      ph = height - mt - mb
      xs = series.flat_map { |s| s[:points].map(&:first) }.uniq.sort
      ys = series.flat_map { |s| s[:points].map(&:last) }.compact.select(&:positive?)
      out = header(width, height, title)
      if xs.empty? || ys.empty?
        out << text(width / 2, height / 2, "no data", anchor: "middle")
        return out << "</svg>\n"
      end
      xpos = lambda do |x|
        xs.size == 1 ? ml + pw / 2.0 : ml + pw * (Math.log2(x) - Math.log2(xs.first)) / (Math.log2(xs.last) - Math.log2(xs.first))
      end
      if ylog
        yt = log_ticks(ys.min, ys.max)
        ylo = Math.log10(yt.first)
        yhi = Math.log10(yt.last)
        ypos = ->(y) { mt + ph - ph * (Math.log10([y, yt.first].max) - ylo) / (yhi - ylo) }
      else
        yt = ticks(ys.max * 1.05)
        ypos = ->(y) { mt + ph - ph * y / yt.last.to_f }
      end
      yt.each do |t|
        y = ypos.call(t).round(1)
        out << %(<line x1="#{ml}" y1="#{y}" x2="#{ml + pw}" y2="#{y}" stroke="#e3e3e3"/>\n)
        out << text(ml - 6, y + 4, fmt(t), anchor: "end", size: 11)
      end
      xs.each do |x|
        px = xpos.call(x).round(1)
        out << %(<line x1="#{px}" y1="#{mt}" x2="#{px}" y2="#{mt + ph}" stroke="#f0f0f0"/>\n)
        out << text(px, mt + ph + 16, fmt(x), anchor: "middle", size: 11)
      end
      out << %(<rect x="#{ml}" y="#{mt}" width="#{pw}" height="#{ph}" fill="none" stroke="#444"/>\n)
      out << text(ml + pw / 2, height - 14, xlabel, anchor: "middle", size: 13)
      out << %(<text x="18" y="#{mt + ph / 2}" #{FONT} font-size="13" text-anchor="middle" ) +
             %(transform="rotate(-90 18 #{mt + ph / 2})">#{esc(ylabel)}</text>\n)
      series.each_with_index do |s, i|
        color = s[:color] || PALETTE[i % PALETTE.size]
        pts = s[:points].reject { |_, y| y.nil? || (ylog && !y.positive?) }.map { |x, y| "#{xpos.call(x).round(1)},#{ypos.call(y).round(1)}" }
        dash = s[:dash] ? %( stroke-dasharray="6,4") : ""
        width_attr = s[:bold] ? 3 : 2
        out << %(<polyline fill="none" stroke="#{color}" stroke-width="#{width_attr}"#{dash} points="#{pts.join(' ')}"/>\n) if pts.size > 1
        pts.each do |pt|
          cx, cy = pt.split(",")
          out << %(<circle cx="#{cx}" cy="#{cy}" r="3" fill="#{color}"/>\n)
        end
        ly = mt + 8 + i * 20
        out << %(<line x1="#{ml + pw + 14}" y1="#{ly}" x2="#{ml + pw + 40}" y2="#{ly}" stroke="#{color}" stroke-width="#{width_attr}"#{dash}/>\n)
        out << text(ml + pw + 46, ly + 4, s[:name], size: 12)
      end
      out << "</svg>\n"
    end

    # groups: [{ name:, values: { "series" => number } }]; one horizontal bar per series
    # in each group.
    def bar_chart(title:, xlabel:, groups:, series:, width: 760, bar_h: 14)
      ml = 150
      mr = 150
      mt = 46
      gap = 12
      rows = groups.sum { |g| series.count { |s| g[:values][s] } }
      ph = rows * bar_h + groups.size * gap
      height = mt + ph + 56
      pw = width - ml - mr
      vals = groups.flat_map { |g| g[:values].values }.compact
      out = header(width, height, title)
      return out << text(width / 2, height / 2, "no data", anchor: "middle") << "</svg>\n" if vals.empty?

      xt = ticks(vals.max * 1.05)
      xpos = ->(v) { ml + pw * v / xt.last.to_f }
      xt.each do |t|
        x = xpos.call(t).round(1)
        out << %(<line x1="#{x}" y1="#{mt}" x2="#{x}" y2="#{mt + ph}" stroke="#e3e3e3"/>\n)
        out << text(x, mt + ph + 16, fmt(t), anchor: "middle", size: 11)
      end
      y = mt + gap / 2
      groups.each do |g|
        present = series.select { |s| g[:values][s] }
        out << text(ml - 8, y + present.size * bar_h / 2.0 + 4, g[:name], anchor: "end", size: 12)
        present.each do |s|
          v = g[:values][s]
          color = PALETTE[series.index(s) % PALETTE.size]
          out << %(<rect x="#{ml}" y="#{y}" width="#{(xpos.call(v) - ml).round(1)}" height="#{bar_h - 2}" fill="#{color}"/>\n)
          out << text(xpos.call(v) + 4, y + bar_h - 4, fmt(v.round(1)), size: 10)
          y += bar_h
        end
        y += gap
      end
      out << %(<rect x="#{ml}" y="#{mt}" width="#{pw}" height="#{ph}" fill="none" stroke="#444"/>\n)
      out << text(ml + pw / 2, height - 14, xlabel, anchor: "middle", size: 13)
      series.each_with_index do |s, i|
        ly = mt + 8 + i * 20
        out << %(<rect x="#{ml + pw + 14}" y="#{ly - 6}" width="14" height="12" fill="#{PALETTE[i % PALETTE.size]}"/>\n)
        out << text(ml + pw + 34, ly + 4, s, size: 12)
      end
      out << "</svg>\n"
    end

    def header(width, height, title)
      +%(<svg xmlns="http://www.w3.org/2000/svg" width="#{width}" height="#{height}" viewBox="0 0 #{width} #{height}">\n) <<
        %(<rect width="100%" height="100%" fill="white"/>\n) <<
        text(width / 2, 26, title, anchor: "middle", size: 16, bold: true)
    end

    def text(x, y, str, anchor: "start", size: 12, bold: false)
      w = bold ? %( font-weight="bold") : ""
      %(<text x="#{x.round(1)}" y="#{y.round(1)}" #{FONT} font-size="#{size}" text-anchor="#{anchor}"#{w}>#{esc(str)}</text>\n)
    end
  end
end
