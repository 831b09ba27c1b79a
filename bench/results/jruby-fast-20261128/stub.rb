# The upper-bound experiment of run 1 (jx1): appended to lib/margay/pure.rb of a copy of main
# (41b7577) and switched on with MARGAY_STUB=2. Not correct code: it answers a repeated request
# head, a repeated response fields Hash and every env from caches, so that their cost is ~0.
if ENV["MARGAY_STUB"]
  module Margay::Pure::Parser
    STUB = {}
    class << self
      alias_method :real_parse, :parse
      def parse(buf, **kw)
        hit = STUB[buf]
        return hit.dup if hit

        r = real_parse(buf, **kw)
        STUB[buf.dup.freeze] = r if r.is_a?(Struct) && STUB.size < 64
        r
      end
    end
  end
  module Margay::Pure::Head
    STUB_H = {}
    alias_method :real_head_begin, :head_begin
    def head_begin(status, headers)
      if status == 200 && headers.size == 2 && (hit = STUB_H[headers])
        b = hit.dup
        b.out = hit.out.dup
        return b
      end
      r = real_head_begin(status, headers)
      STUB_H[headers.dup.freeze] = r.dup.tap { |x| x.out = x.out.dup.freeze } if status == 200 && headers.size == 2 && STUB_H.size < 8
      r
    end
  end
  if ENV["MARGAY_STUB"] == "2"
    module Margay::Pure::Env
      alias_method :real_env_for, :env_for
      def env_for(conn)
        e = (@stub_env ||= real_env_for(conn))
        e.dup
      end
    end
  end
end
