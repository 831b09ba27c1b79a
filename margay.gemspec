# frozen_string_literal: true

require_relative "lib/margay/version"

Gem::Specification.new do |spec|
  spec.name = "margay"
  spec.version = Margay::VERSION
  spec.summary = "A Rack 3 application server whose I/O hot path runs in C without the GVL"
  spec.description = "Margay accepts, reads, parses, buffers and writes HTTP/1.1 in C outside the " \
                     "GVL; Ruby threads only ever run the application."
  spec.authors = ["Margay developers"]
  spec.license = "MIT"
  # No homepage: the project has no public URL yet (no remote, none in the
  # README). Add `spec.homepage = "https://..."` with the real repository once
  # it is published; an invented one would send users to someone else's page.
  spec.metadata["rubygems_mfa_required"] = "true"
  spec.required_ruby_version = ">= 3.1"
  # the extension: every source under ext/margay/ as extconf.rb builds it (not the fuzz harnesses)
  spec.files = Dir["lib/**/*.rb", "ext/margay/**/*.{c,h,rb}", "exe/*", "README.md", "CHANGELOG.md", "docs/*.md"] -
               Dir["ext/margay/fuzz/**/*"]
  spec.bindir = "exe"
  spec.executables = ["margay"]
  spec.extensions = ["ext/margay/extconf.rb"]
  spec.require_paths = ["lib"]
  spec.add_dependency "rack", ">= 3.0", "< 4"
end
