# prints, per queue-*.json in a dir (time order), one line per round: each server's req/s, p99 ms, p99/mean
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + '/queue-[aw]*.json')):
    d = json.load(open(f)); o = d['options']
    app = 'rails' if 'rails' in o['app'] else 'io'
    name = f"{o['load']} {app} w{o['workers']} c{o['connections']}" + (' fibers' if o.get('fibers') else '') + (' ' + ' '.join(o['margay_args']) if o.get('margay_args') else '')
    print(f"### {f.split('/')[-1]}: {name}")
    rounds = {}
    for r in d['rows']: rounds.setdefault(r['round'], {})[r['server']] = r
    for n, rs in sorted(rounds.items()):
        cells = []
        for s in ['margay', 'margay-base', 'puma']:
            if s in rs:
                r = rs[s]; m = r.get('mean_ms')
                if o['load'] == 'arrival':
                    cells.append(f"{s} {r['rps']}")
                else:
                    cells.append(f"{s} {r['rps']:.1f}, {r['p99_ms']:.1f}, " + (f"{r['p99_ms']/m:.2f}" if m else '-'))
        print(f"  {n}: " + ' | '.join(cells))
