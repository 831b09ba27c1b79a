# frozen_string_literal: true

require "minitest/autorun"

# docs/ARCHITECTURE.md's file table lists every file of the code, the tests,
# the benchmarks and the tooling, so that a file added without a row (or a row
# left behind by a file that moved) fails the suite instead of the doc going
# quietly stale. A row's first cell names files: `dir/a.rb`, `b.rb` means
# dir/a.rb and dir/b.rb (a name without a folder sits beside the one before).
class ArchitectureDocTest < Minitest::Test
  ROOT = File.expand_path("../..", __dir__)
  DOC = File.join(ROOT, "docs/ARCHITECTURE.md")
  # Listed as folders, not file by file (the doc says so).
  UNLISTED = %r{\A(ext/margay/fuzz/seeds/|bench/results/|bench/apps/rails/|test/fixtures/rails_app/|test/fixtures/puma_configs/)}
  # The folders and files the table covers.
  COVERED = %r{\A(lib/|ext/|exe/|test/|bench/|\.ci/|rakelib/|Rakefile\z)}
  # The only files at the repository's root: anything else there is a stray a run left
  # behind (a pid file, a log) and belongs in a folder or in .gitignore.
  ROOT_FILES = %w[.gitignore CHANGELOG.md Gemfile Gemfile.lock README.md Rakefile margay.gemspec].freeze

  def test_every_file_has_a_row_and_every_row_a_file
    files = tracked_files.grep(COVERED).grep_v(UNLISTED)
    listed = table_paths
    assert_empty files - listed, "files without a row in docs/ARCHITECTURE.md's file table"
    assert_empty listed.grep(COVERED).grep_v(UNLISTED).reject { |p| File.exist?(File.join(ROOT, p)) },
                 "rows naming files that do not exist"
  end

  def test_no_stray_file_at_the_root
    assert_empty tracked_files.grep_v(%r{/}) - ROOT_FILES, "files at the repository's root that are not in ROOT_FILES"
  end

  private

  # What git tracks; without git (the Ruby 3.3 chroot tests a copy), the files
  # on disk less what the build and the tests leave behind.
  def tracked_files
    Dir.chdir(ROOT) { IO.popen(%w[git ls-files -z], err: File::NULL, &:read).to_s.split("\0") }
  rescue SystemCallError
    Dir.chdir(ROOT) do
      Dir.glob(["{lib,ext,exe,test,bench,.ci,rakelib}/**/*", "Rakefile"], File::FNM_DOTMATCH)
         .select { |f| File.file?(f) }
         .grep_v(%r{(\.(so|o|log)|/Makefile|/\.bundle/.*|/extconf\.h|\.pyc)\z|\A(tmp|bench/results/tmp)/})
    end
  end

  def table_paths
    table = File.read(DOC)[/^## Files\n.*?(?=^## |\z)/m]
    table.scan(/^\| (`[^|]+`) \|/).flat_map do |(cell)|
      names = cell.scan(/`([^`]+)`/).flatten
      dir = nil
      names.map do |name|
        next File.join(dir || ".", name).delete_prefix("./") unless name.include?("/")

        dir = File.dirname(name)
        name
      end
    end
  end
end
