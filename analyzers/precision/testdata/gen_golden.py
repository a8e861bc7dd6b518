#!/usr/bin/python3
"""Write golden.json: reference values for precision.KL from scipy 1.10.

Run from the repository root with the Debian interpreter:

    /usr/bin/python3 analyzers/precision/testdata/gen_golden.py

Each case is two top-k lists (token -> logprob, rounded to 6 decimals so the
Go test reads exactly what scipy saw). The lists are turned into two
distributions over the union of their tokens plus a "rest" bucket by the rule
documented on precision.KL (a side's unlisted mass spread evenly over the
union tokens it does not list and the rest bucket; floor 1e-10; renormalize),
and scipy.stats.entropy(p, q) gives KL(p || q) in nats.
"""

import json
import math
import os

import numpy as np
import scipy
from scipy import stats

assert scipy.__version__.startswith("1.10."), scipy.__version__

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.json")
VOCAB = ["the", "a", "of", "to", "and", "in", "is", "it", "that", "on", "for", "with"]


def spread(alts, union):
    d = np.zeros(len(union) + 1)
    known = [False] * len(union)
    mass = 0.0
    for tok, lp in alts:
        i = union.index(tok)
        if known[i]:
            continue
        known[i] = True
        d[i] = math.exp(lp)
        mass += d[i]
    unknown = 1 + known.count(False)
    share = max(1 - mass, 0) / unknown
    for i, k in enumerate(known):
        if not k:
            d[i] = share
    d[-1] = share
    d = np.maximum(d, 1e-10)
    return d / d.sum()


def topk(rng, k, conc):
    probs = rng.dirichlet(np.full(len(VOCAB), conc))
    order = np.argsort(-probs)[:k]
    return [(VOCAB[i], round(math.log(probs[i]), 6)) for i in order]


def main():
    rng = np.random.default_rng(20261129)
    cases = []
    for n in range(40):
        k = int(rng.integers(1, 8))
        p = topk(rng, k, float(rng.choice([0.1, 0.5, 2.0])))
        if n % 4 == 0:
            q = [(t, round(lp + rng.normal(0, 0.3), 6)) for t, lp in p]  # quantization-like noise
            q = [(t, min(lp, 0.0)) for t, lp in q]
        else:
            q = topk(rng, int(rng.integers(1, 8)), float(rng.choice([0.1, 0.5, 2.0])))
        union = []
        for t, _ in p + q:
            if t not in union:
                union.append(t)
        kl = float(stats.entropy(spread(p, union), spread(q, union)))
        cases.append({"p": p, "q": q, "kl": kl})
    # Identical lists: zero.
    p = topk(rng, 5, 0.5)
    cases.append({"p": p, "q": p, "kl": 0.0})
    with open(OUT, "w") as f:
        json.dump({"scipy": scipy.__version__, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
