# frozen_string_literal: true
class A2; def initialize(a, b); @a = a; @b = b; end; end
class A3; def initialize(a, b, c); @a = a; @b = b; @c = c; end; end
class A4; def initialize(a, b, c); @a = a; @b = b; @c = c; @d = nil; end; end
S2 = Struct.new(:a, :b)
E = Object.new
TPL = {}
23.times { |i| TPL["KEY_NUMBER_#{i}"] = i }
N = 200_000
v = ARGV[0]
x = nil
t = 12345
case v
when "empty" then N.times { x = t }
when "a2" then N.times { x = A2.new(E, t) }
when "a3" then N.times { x = A3.new(E, t, x) }
when "a4" then N.times { x = A4.new(E, t, x) }
when "s2" then N.times { x = S2.new(E, t) }
when "lam" then N.times { x = ->(h) { E.to_s if h; t } }
when "ary" then N.times { x = [] }
when "dup" then N.times { x = TPL.dup }
when "dupset" then N.times { x = TPL.dup; x["rack.early_hints"] = t }
when "dupkey" then N.times { x = TPL.dup; x.key?("HTTP_UPGRADE") }
end
