#!/usr/bin/python3
"""Write golden.json: reference values for analyzers/calibrate from numpy 1.24,
scikit-learn 1.2 and scipy 1.10.

Run from the repository root with the Debian interpreter:

    /usr/bin/python3 analyzers/calibrate/testdata/gen_golden.py

The output is deterministic (fixed numpy seed). Confidences are rounded to 6
decimals before any reference value is computed, except in the "edges" case,
whose values are bin edges and their floating-point neighbours on purpose, so
the Go tests read exactly the inputs the references saw (JSON floats
round-trip exactly).

Per case:
  - ece, mce and the per-bin counts come from a plain numpy implementation of
    the package's definition (bin k holds e_k < p <= e_{k+1}, bin 0 also
    p = 0, with e = numpy.linspace(0, 1, bins+1)); the script asserts that
    its non-empty bins equal sklearn's calibration_curve(strategy="uniform");
  - prob_true and prob_pred are sklearn's calibration_curve output (non-empty
    bins only, in bin order);
  - temperature is scipy.optimize.minimize_scalar(method="bounded") over
    log T in [log 0.05, log 20] (xatol 1e-10) of the mean binary NLL of
    sigmoid(logit(clip(p, 1e-12, 1-1e-12)) / T); nll and nll_calibrated are
    that NLL at T = 1 and at the fitted T.
"""

import json
import math
import os

import numpy as np
import scipy
import sklearn
from scipy.optimize import minimize_scalar
from sklearn.calibration import calibration_curve

assert np.__version__.startswith("1.24."), np.__version__
assert scipy.__version__.startswith("1.10."), scipy.__version__
assert sklearn.__version__.startswith("1.2."), sklearn.__version__

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.json")
rng = np.random.default_rng(20261129)

CLIP = 1e-12
LOG_T = (math.log(0.05), math.log(20.0))


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def r6(a):
    return np.round(np.asarray(a, dtype=float), 6)


def bin_ids(p, bins):
    """Bin of each p by explicit comparison with the edges (not searchsorted)."""
    e = np.linspace(0.0, 1.0, bins + 1)
    ids = np.full(len(p), -1)
    for k in range(bins):
        lo, hi = e[k], e[k + 1]
        inside = (p > lo) & (p <= hi) if k > 0 else (p >= lo) & (p <= hi)
        assert np.all(ids[inside] == -1)
        ids[inside] = k
    assert np.all(ids >= 0)
    return ids


def nll(z, y, t):
    # -log sigmoid(z/t) for y = 1, -log(1 - sigmoid(z/t)) for y = 0.
    s = np.where(y, -z / t, z / t)
    return float(np.mean(np.logaddexp(0.0, s)))


def case(name, p, y, bins):
    p = np.asarray(p, dtype=float)
    y = np.asarray(y, dtype=bool)
    n = len(p)
    ids = bin_ids(p, bins)
    counts = np.array([np.sum(ids == k) for k in range(bins)])
    ece, mce = 0.0, 0.0
    conf_b, acc_b = [], []
    for k in range(bins):
        m = ids == k
        if not m.any():
            continue
        conf = float(np.sum(p[m])) / counts[k]
        acc = float(np.sum(y[m])) / counts[k]
        conf_b.append(conf)
        acc_b.append(acc)
        ece += counts[k] / n * abs(acc - conf)
        mce = max(mce, abs(acc - conf))

    prob_true, prob_pred = calibration_curve(y, p, n_bins=bins, strategy="uniform")
    assert len(prob_true) == len(acc_b), (name, len(prob_true), len(acc_b))
    np.testing.assert_allclose(prob_true, acc_b, rtol=1e-12, atol=0)
    np.testing.assert_allclose(prob_pred, conf_b, rtol=1e-12, atol=0)

    pc = np.clip(p, CLIP, 1 - CLIP)
    z = np.log(pc / (1 - pc))
    res = minimize_scalar(lambda u: nll(z, y, math.exp(u)), bounds=LOG_T,
                          method="bounded",
                          options={"xatol": 1e-10, "maxiter": 1000})
    assert res.success, (name, res)
    t = math.exp(res.x)
    return {
        "name": name,
        "bins": bins,
        "confidence": [float(v) for v in p],
        "correct": [bool(v) for v in y],
        "labels": n,
        "accuracy": float(np.mean(y)),
        "mean_confidence": float(np.mean(p)),
        "ece": float(ece),
        "mce": float(mce),
        "counts": [int(c) for c in counts],
        "prob_true": [float(v) for v in prob_true],
        "prob_pred": [float(v) for v in prob_pred],
        "temperature": t,
        "nll": nll(z, y, 1.0),
        "nll_calibrated": nll(z, y, t),
    }


def labels_for(q):
    return rng.random(len(q)) < q


cases = []

# Well calibrated: the label is drawn with the stated confidence.
q = r6(np.clip(rng.beta(5, 2, 3000), 1e-6, 1))
cases.append(case("well_calibrated", q, labels_for(q), 15))

# Over-confident: true probability q, stated sigmoid(2.5·logit q); T near 2.5.
q = rng.beta(4, 2, 3000)
p = r6(np.clip(sigmoid(2.5 * np.log(q / (1 - q))), 1e-6, 1))
cases.append(case("over_confident", p, labels_for(q), 10))

# Under-confident: stated sigmoid(logit(q)/2); T near 0.5.
q = rng.beta(3, 2, 2000)
p = r6(np.clip(sigmoid(np.log(q / (1 - q)) / 2), 1e-6, 1))
cases.append(case("under_confident", p, labels_for(q), 10))

# All correct with every confidence above 1/2: the NLL falls as T falls, so T
# ends at the 0.05 bound. A few confidences of exactly 1 exercise the
# clipping. With some confidences below 1/2 the minimum is interior again.
p = np.concatenate([r6(rng.uniform(0.51, 1.0, 500)), [1.0, 1.0, 1.0]])
cases.append(case("all_correct", p, np.ones(len(p), dtype=bool), 10))
p = r6(rng.uniform(0.3, 1.0, 300))
cases.append(case("all_correct_low", p, np.ones(len(p), dtype=bool), 10))

# Ties at bin edges: every edge of linspace(0, 1, 11) and of the decimal
# k/10 (not always equal: 3·0.1 != 0.3), their neighbours one ulp away, and
# 0 itself (clipped to 1e-12 for the temperature).
e10 = np.linspace(0.0, 1.0, 11)
vals = list(e10) + [k / 10 for k in range(11)]
vals += list(np.nextafter(e10[1:], 0.0)) + list(np.nextafter(e10[:-1], 1.0))
vals += [0.25, 0.5, 0.75]
p = np.array(vals * 3, dtype=float)
cases.append(case("edges_10", p, labels_for(np.clip(p, 0.05, 0.95)), 10))
e4 = np.linspace(0.0, 1.0, 5)
p = np.array(list(e4) * 4 + [0.125, 0.375, 0.625, 0.875] * 2, dtype=float)
cases.append(case("edges_4", p, labels_for(np.clip(p, 0.05, 0.95)), 4))

# Small n, and a single bin.
cases.append(case("small", [0.9, 0.6, 0.3, 0.8, 0.55], [True, False, False, True, True], 5))
cases.append(case("one_bin", [0.2, 0.7, 0.95, 0.4], [False, True, True, True], 1))

with open(OUT, "w") as f:
    # One case per line: compact, yet diffs name the case that changed.
    head = json.dumps({"generator": "gen_golden.py", "numpy": np.__version__,
                       "scipy": scipy.__version__, "sklearn": sklearn.__version__})
    f.write(head[:-1] + ', "cases": [\n')
    f.write(",\n".join(json.dumps(c) for c in cases))
    f.write("\n]}\n")
for c in cases:
    print(f"{c['name']:16} n={c['labels']:5} ece={c['ece']:.4f} T={c['temperature']:.6f} "
          f"nll={c['nll']:.4f}->{c['nll_calibrated']:.4f}")
