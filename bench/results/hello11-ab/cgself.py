#!/usr/bin/env python3
# cgself.py A B [N] [NB]: self (exclusive) Ir per function from two callgrind.out files, per request
# (A's divided by N, 5000; B's by NB, N unless given), sorted by the difference B - A; the first 50
# and the totals.
import re, sys
def load(path):
    names, self_cost, fn, after_calls = {}, {}, None, False
    obname = {}
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = re.match(r'^(fn|cfn|ob|cob|fl|fi|fe|cfi|cfl)=\((\d+)\)(?: (.*))?$', line)
        if m:
            kind, idx, name = m.groups()
            if kind in ("fn", "cfn"):
                if name: names[idx] = name
                if kind == "fn":
                    fn = names.get(idx, idx)
            continue
        if line.startswith("fn="):
            fn = line[3:]; continue
        if line.startswith("calls="):
            after_calls = True; continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            parts = line.split()
            if after_calls:
                after_calls = False; continue
            if len(parts) >= 2 and fn is not None:
                self_cost[fn] = self_cost.get(fn, 0) + int(parts[1])
    return self_cost
a, b = load(sys.argv[1]), load(sys.argv[2])
n = float(sys.argv[3]) if len(sys.argv) > 3 else 5000.0
nb = float(sys.argv[4]) if len(sys.argv) > 4 else n
b = {k: v * n / nb for k, v in b.items()}  # B per request on A's scale
print("%10s %10s %9s  function" % ("A/req", "B/req", "B-A"))
print("%10.0f %10.0f %+9.0f  TOTAL" % (sum(a.values())/n, sum(b.values())/n, (sum(b.values())-sum(a.values()))/n))
for k in sorted(set(a) | set(b), key=lambda k: -abs(b.get(k, 0) - a.get(k, 0)))[:50]:
    print("%10.0f %10.0f %+9.0f  %s" % (a.get(k, 0)/n, b.get(k, 0)/n, (b.get(k, 0)-a.get(k, 0))/n, k))
