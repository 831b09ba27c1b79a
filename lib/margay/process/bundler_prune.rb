# frozen_string_literal: true

require "rbconfig"

module Margay
  # The `prune_bundler` setting (Puma's): a cluster master that never loads the app (mold_boot,
  # or preload_app false) runs without Bundler. `bundle exec` loads Bundler, its command line
  # and every gem specification of the bundle into the process it starts (about 7 MiB private
  # on the Rails bench app, bench/results/memory3-20261127); the app's workers need that, the
  # master does not. So the master executes itself again at once (the same pid, before binding
  # or loading anything) with RUBYOPT's `-rbundler/setup` left out and Margay's own load path
  # (its gem and its runtime dependencies, the versions of the bundle) on the command line; the
  # worker that loads the app requires bundler/setup first, as RUBYOPT would have, with the
  # same BUNDLE_GEMFILE. The environment is left as it was, so a hot restart starts under
  # Bundler again (the new bundle) and prunes again.
  module BundlerPrune
    module_function

    # Called by the launcher after Allocator.reexec. Replaces the process with Margay's own
    # executable run with +argv+'s arguments (+argv+: the script and its arguments, nil when
    # not started by the margay command) without Bundler, when +config+ asks for it and it
    # applies. Otherwise returns the warning to log (nil: nothing to say).
    def reexec(config, argv, cluster:)
      return nil unless config.prune_bundler
      return "prune_bundler ignored: the app is loaded in this process (single mode)" unless cluster
      return "prune_bundler ignored: the master loads the app (preload_app)" if config.preload_app?
      return nil unless bundler_setup # not started under Bundler, or pruned already
      return "prune_bundler needs the margay command to re-execute itself; ignored" unless argv

      Kernel.exec(RbConfig.ruby, "--disable-rubyopt", *rubyopt_rest, *load_path.flat_map { |dir| ["-I", dir] },
                  EXE, *argv.drop(1), close_others: false)
    end

    # In the worker about to load the app, when the master was pruned: bundler/setup, as
    # RUBYOPT says (nothing when Bundler is loaded already).
    def restore(config)
      return unless config.prune_bundler && !defined?(::Bundler) && (feature = rubyopt_setup)

      require feature
    end

    # The executable of this Margay (not a wrapper that would resolve another version).
    EXE = File.expand_path("../../../exe/margay", __dir__)

    # Bundler's setup is loaded here, through RUBYOPT: the feature it names (nil otherwise).
    def bundler_setup
      defined?(::Bundler) && rubyopt_setup
    end

    def rubyopt_tokens
      ENV["RUBYOPT"].to_s.split
    end

    # RUBYOPT's -r of bundler/setup, as the feature to require.
    def rubyopt_setup
      token = rubyopt_tokens.find { |t| setup_token?(t) }
      token && token.delete_prefix("-r")
    end

    def setup_token?(token)
      token.start_with?("-r") && token.end_with?("bundler/setup")
    end

    # RUBYOPT's other switches, on the command line instead (RUBYOPT is not read at all).
    def rubyopt_rest
      rubyopt_tokens.reject { |t| setup_token?(t) }
    end

    # Margay's lib (the native extension is there), the require paths of the gems it needs at
    # run time, as the bundle resolved them, and those of the bundle's versions of Ruby's
    # default gems (json, securerandom, uri, ...): what the master requires of them is then
    # found there (-I beats RubyGems), not activated by RubyGems at the newest version
    # installed, which the worker's Bundler.setup refuses when the Gemfile.lock has another
    # ("You have already activated json X, but your Gemfile requires json Y").
    def load_path
      margay_load_path + bundled_default_gems
    end

    def bundled_default_gems
      defaults = Gem::Specification.default_stubs.map(&:name)
      Gem.loaded_specs.values.reject(&:default_gem?).select { |spec| defaults.include?(spec.name) }
         .flat_map(&:full_require_paths)
    end

    def margay_load_path
      dirs = [File.expand_path("../..", __dir__)]
      seen = {}
      queue = ["margay"]
      until queue.empty?
        spec = Gem.loaded_specs[queue.shift]
        next if spec.nil? || seen[spec.name]

        seen[spec.name] = true
        dirs.concat(spec.full_require_paths) unless spec.name == "margay"
        queue.concat(spec.runtime_dependencies.map(&:name))
      end
      dirs << rack_fallback if !seen["rack"] && rack_fallback
      dirs.uniq
    end

    # Rack's require path when Margay is not a gem of the bundle (run from a source tree).
    def rack_fallback
      Gem.loaded_specs["rack"]&.full_require_paths&.first
    end
  end
end
