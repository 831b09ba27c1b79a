# Probe only (not kept): 5,000 Times (write-barrier unprotected on Ruby 3.1) kept alive from the
# master's before_fork, so its settling full GCs count them among the uncollectible
# WB-unprotected objects, and Ruby's limit for a `shady` full GC (twice that count) starts at
# ~11,000 rather than ~1,030.
before_fork { $railsgc_ballast = Array.new(5000) { Time.now } }
