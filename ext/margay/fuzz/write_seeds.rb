# frozen_string_literal: true

# Writes the fuzz seed corpus (run by `rake fuzz:seeds`, with -Ilib -Itest): the request heads of
# test/ext/http/parser_test.rb and the bodies of test/ext/http/chunked_test.rb, plus the requests of
# the conformance corpus test/corpus/cases.rb when it exists; the PROXY v1 inputs (proxy/) are the
# corpus requests of a proxy_protocol server and the lines of test/wire/wire_rules_test.rb. Files are named by content digest,
# so rewriting is idempotent and duplicates collapse. Inputs above MAX_SEED bytes are left out
# (the fuzzers run with -max_len=4096, and big seeds would bloat the repository).
require "digest"
require "fileutils"
require "minitest"

# Load the test files for their CASES tables without running them.
def Minitest.autorun; end

MAX_SEED = 4096

root = File.expand_path("../../..", __dir__)
require File.join(root, "test/ext/http/parser_test")
require File.join(root, "test/ext/http/chunked_test")

require File.join(root, "test/wire/wire_rules_test")

heads = Margay::ParserTest::CASES.map(&:first)
bodies = Margay::ChunkedTest::CASES.map(&:first)
proxies = Margay::WireRulesTest::BAD_LINES.values.map(&:b)

corpus = File.join(root, "test/corpus/cases.rb")
if File.exist?(corpus)
  require corpus
  Margay::Corpus::CASES.each do |c|
    raw = c[:request].to_s.b
    next if raw.empty?

    heads << raw
    proxies << raw if c.dig(:settings, :proxy_protocol)
    r = Margay::Native.parse_head(raw, *Margay::Configuration::DEFAULTS.values_at(:max_request_target, :max_header_size,
                                                                                 :max_headers))
    bodies << raw.byteslice(r[:head_len]..) if r.is_a?(Hash) && r[:chunked]
  end
end

{ "head" => heads, "chunked" => bodies, "proxy" => proxies }.each do |kind, inputs|
  dir = File.join(__dir__, "seeds", kind)
  FileUtils.rm_rf(dir)
  FileUtils.mkdir_p(dir)
  inputs.uniq.select { |input| input.bytesize <= MAX_SEED }.each { |input| File.binwrite(File.join(dir, Digest::SHA1.hexdigest(input)[0, 16]), input) }
  puts "#{dir}: #{Dir.children(dir).size} seeds"
end
