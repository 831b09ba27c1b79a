# frozen_string_literal: true

require "test_helper"
require "stringio"
require "margay/cli"
require "margay/configuration/dsl"

# Held against the installed Puma gem's own source (the bench bundle's): every
# flag of its CLI and every config-file name of its DSL is known to Margay.
# When Puma adds one, this fails until Margay decides what it means.
class PumaNamesTest < Minitest::Test
  # Hook directives are mapped by the hooks' own code and tested there.
  HOOK = /\A(?:on|before|after)_|\Aout_of_band\z/

  def puma_file(path)
    found = Gem.path.flat_map { |dir| Dir[File.join(dir, "gems", "puma-*", "lib", "puma", path)] }.max
    skip "the puma gem is not installed (bench/Gemfile installs it)" unless found
    File.read(found)
  end

  # Public instance methods of Puma::DSL: `def name` before `private`.
  def puma_dsl_names
    public_part = puma_file("dsl.rb").split(/^\s+private\s*$/).first
    public_part.scan(/^\s+def (?!self\.)([a-z]\w*[!?]?)/).flatten.uniq - %w[initialize]
  end

  def test_every_puma_dsl_name_is_a_directive
    evaluator = Margay::Configuration::DSL::Evaluator.new("config/puma.rb")
    names = puma_dsl_names.grep_v(HOOK)
    assert_operator names.size, :>, 60, "parsed Puma's DSL"
    missing = names.reject { |name| evaluator.respond_to?(name) }
    assert_empty missing, "Puma config names Margay does not know"
  end

  def test_every_puma_cli_flag_is_accepted
    flags = puma_file("cli.rb").scan(/o\.on(?:_tail)?\s+(.+)$/).map do |(args)|
      strings = args.scan(/["']([^"']*)["']/).flatten
      long, arg = strings.find { |s| s.start_with?("--") }.split(/[= ]/, 2)
      [strings.find { |s| s.match?(/\A-\w\z/) }, long, arg]
    end
    assert_operator flags.size, :>, 25, "parsed Puma's flags"
    sample = { "--bind" => "tcp://127.0.0.1:0", "--config" => "-", "--control-url" => "tcp://127.0.0.1:0",
               "--environment" => "test", "--port" => "0", "--threads" => "1:2", "--workers" => "0",
               "--idle-timeout" => "5", "--include" => "lib" }
    flags.each do |short, long, arg|
      long = long.sub("[no-]", "")
      argv = [long]
      argv << sample.fetch(long, "x") if arg && !arg.start_with?("[")
      argv << "--no-config" unless long == "--config" || long == "--no-config"
      err = StringIO.new
      cli = Margay::CLI.new(argv, out: StringIO.new, err: err)
      cli.send(:parse)
      assert_equal "", err.string.lines.reject { |l| l.include?("is a Puma flag Margay has no use for") }.join, long
      next unless short

      assert_includes cli.send(:parser).help, "#{short}, #{long}", "#{short} is #{long}, as in Puma"
    rescue Margay::UsageError => e
      flunk "#{argv.inspect}: #{e.message}"
    end
  end
end
