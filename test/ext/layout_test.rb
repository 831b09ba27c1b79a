# frozen_string_literal: true

require "test_helper"

# The GVL boundary as the layout of ext/margay/ draws it, held against the code:
#   http/  pure HTTP: includes only http/ and the C library
#   ev/    the event backends: include only ev/ and the C library
#   core/  the engine without the GVL: includes only core/, http/, ev/ and the C library
#   ruby/  (and margay.c) may include anything
# and nothing under http/, ev/ or core/ reaches ruby.h (directly or through a header), names
# an rb_* function or uses VALUE: that code runs without the GVL, where calling Ruby is a bug.
class LayoutTest < Minitest::Test
  EXT = File.expand_path("../../ext/margay", __dir__)
  RUBY_FREE = %w[http ev core].freeze
  MAY_INCLUDE = { "http" => %w[http], "ev" => %w[ev], "core" => %w[core http ev] }.freeze

  def test_the_layers_include_only_the_layers_below
    MAY_INCLUDE.each do |layer, allowed|
      sources(layer).each do |file|
        local_includes(file).each do |target|
          assert_includes allowed, folder(target), "#{relative(file)} includes #{relative(target)}"
        end
      end
    end
  end

  def test_nothing_without_the_gvl_reaches_ruby_h
    RUBY_FREE.flat_map { |layer| sources(layer) }.each do |file|
      reached = reachable(file)
      ruby = reached.flat_map { |f| system_includes(f).map { |name| [f, name] } }
                    .select { |_, name| name == "ruby.h" || name.start_with?("ruby/") }
      assert_empty ruby.map { |f, name| "#{relative(f)}: <#{name}>" }, "#{relative(file)} reaches Ruby's headers"
    end
  end

  def test_nothing_without_the_gvl_calls_ruby
    RUBY_FREE.flat_map { |layer| sources(layer) }.each do |file|
      ruby = code_of(File.read(file)).scan(/\b(?:rb_\w+|VALUE)\b/).uniq
      assert_empty ruby, "#{relative(file)} uses Ruby's API"
    end
  end

  def test_every_local_include_names_a_file
    sources(".").each do |file|
      quoted_includes(file).each do |name|
        assert resolve(file, name), "#{relative(file)} includes \"#{name}\", which is not there"
      end
    end
  end

  private

  # The C files and headers of +layer+ (a folder of ext/margay; "." for all but fuzz/).
  def sources(layer)
    pattern = layer == "." ? "**/*.{c,h}" : "#{layer}/**/*.{c,h}"
    Dir.glob(pattern, base: EXT).reject { |f| f.start_with?("fuzz/") }.sort.map { |f| File.join(EXT, f) }
  end

  def includes(file, delimiter)
    File.read(file).scan(/^\s*#\s*include\s*#{Regexp.escape(delimiter)}([^">]+)[">]/).flatten
  end

  def quoted_includes(file) = includes(file, '"')
  def system_includes(file) = includes(file, "<")

  # An include "x.h" is looked up beside the including file, then from ext/margay (-I$(srcdir)).
  def resolve(file, name)
    [File.dirname(file), EXT].map { |dir| File.expand_path(name, dir) }.find { |path| File.file?(path) }
  end

  def local_includes(file)
    quoted_includes(file).filter_map { |name| resolve(file, name) }
  end

  # +file+ and every local header it includes, directly or through another.
  def reachable(file, seen = [])
    return seen if seen.include?(file)

    seen << file
    local_includes(file).each { |target| reachable(target, seen) }
    seen
  end

  # The source without comments and string or character literals.
  def code_of(source)
    source.gsub(%r{/\*.*?\*/}m, " ").gsub(%r{//[^\n]*}, " ").gsub(/"(?:\\.|[^"\\\n])*"/, '""')
          .gsub(/'(?:\\.|[^'\\\n])*'/, "' '")
  end

  def folder(path) = relative(path).split("/").first
  def relative(path) = path.delete_prefix("#{EXT}/")
end
