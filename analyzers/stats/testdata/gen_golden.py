#!/usr/bin/python3
"""Write golden.json: reference values for analyzers/stats from scipy 1.10 and
scikit-learn 1.2.

Run from the repository root with the Debian interpreter (it has scipy 1.10.1,
scikit-learn 1.2.1 and numpy 1.24):

    /usr/bin/python3 analyzers/stats/testdata/gen_golden.py

The output is deterministic: inputs come from fixed numpy seeds and are rounded
(to 6 decimals, 4 for the large KS pools) before any reference value is
computed, so the Go tests read exactly the inputs scipy saw.
"""

import json
import math
import os

import numpy as np
import scipy
import sklearn
from scipy import stats
from scipy.spatial import distance
from scipy.stats._stats_py import _attempt_exact_2kssamp
from sklearn.covariance import MinCovDet, ledoit_wolf

assert scipy.__version__.startswith("1.10."), scipy.__version__
assert sklearn.__version__.startswith("1.2."), sklearn.__version__

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.json")
rng = np.random.default_rng(20240521)


def r6(a):
    return np.round(np.asarray(a, dtype=float), 6)


def flist(a):
    return [float(v) for v in np.ravel(a)]


# ---------------------------------------------------------------- KS
# Large samples live in two pools; cases name slices of them to keep the file
# small. 4 decimals keep some ties, which the tests want anyway.
pools = {
    "p0": np.round(rng.normal(0.0, 1.0, 12000), 4),
    "p1": np.round(rng.normal(0.12, 1.0, 3000), 4),
}


def pool_slice(name, lo, hi):
    return {"pool": name, "lo": lo, "hi": hi}, pools[name][lo:hi]


ks_cases = []


def ks_case(name, a, b):
    """a, b: arrays, or (spec, array) pool slices."""
    specs = []
    arrays = []
    for x in (a, b):
        if isinstance(x, tuple):
            specs.append(x[0])
            arrays.append(x[1])
        else:
            x = r6(x)
            specs.append({"values": flist(x)})
            arrays.append(x)
    res = stats.ks_2samp(arrays[0], arrays[1], alternative="two-sided", method="auto")
    n1, n2 = len(arrays[0]), len(arrays[1])
    method = "exact" if max(n1, n2) <= 10000 else "asymp"
    if method == "exact":
        g = math.gcd(n1, n2)
        ok, _, _ = _attempt_exact_2kssamp(n1, n2, g, res.statistic, "two-sided")
        if not ok:
            method = "asymp"
    ks_cases.append({"name": name, "a": specs[0], "b": specs[1],
                     "statistic": float(res.statistic), "pvalue": float(res.pvalue),
                     "method": method})


ks_case("one_vs_one", [0.5], [1.5])
ks_case("one_vs_three", [2.0], [0.1, 0.2, 0.3])
ks_case("small_equal", rng.normal(0, 1, 20), rng.normal(0.5, 1, 20))
ks_case("small_unequal", rng.normal(0, 1, 30), rng.normal(0.3, 1.2, 45))
ks_case("coprime", rng.normal(0, 1, 7), rng.normal(1, 1, 13))
ks_case("ties_int", rng.integers(0, 5, 50).astype(float), rng.integers(0, 5, 60).astype(float))
ks_case("ties_equal_n", rng.integers(0, 3, 40).astype(float), rng.integers(1, 4, 40).astype(float))
same = rng.normal(0, 1, 100)
ks_case("identical", same, same)
ks_case("disjoint", rng.uniform(0, 1, 25), rng.uniform(10, 11, 40))
ks_case("disjoint_equal_n", rng.uniform(0, 1, 30), rng.uniform(5, 6, 30))
ks_case("n1000_shift", pool_slice("p0", 0, 1000), pool_slice("p1", 0, 1000))
ks_case("n3000_vs_2000", pool_slice("p0", 0, 3000), pool_slice("p1", 1000, 3000))
ks_case("exact_5000_null", pool_slice("p0", 0, 5000), pool_slice("p0", 5000, 10000))
ks_case("exact_10000_vs_2000", pool_slice("p0", 0, 10000), pool_slice("p0", 10000, 12000))
ks_case("exact_10000_vs_3000_shift", pool_slice("p0", 0, 10000), pool_slice("p1", 0, 3000))
ks_case("exact_997_vs_1499", pool_slice("p0", 0, 997), pool_slice("p1", 0, 1499))
ks_case("asymp_10001_vs_1500_shift", pool_slice("p0", 0, 10001), pool_slice("p1", 0, 1500))
ks_case("asymp_10001_vs_1999_null", pool_slice("p0", 0, 10001), pool_slice("p0", 10001, 12000))
ks_case("asymp_10500_vs_40", pool_slice("p0", 0, 10500), pool_slice("p1", 1500, 1540))
ks_case("asymp_10500_vs_130", pool_slice("p0", 0, 10500), pool_slice("p1", 1540, 1670))
ks_case("asymp_12000_vs_3000_shift", pool_slice("p0", 0, 12000), pool_slice("p1", 0, 3000))
ks_case("asymp_11000_vs_5", pool_slice("p0", 0, 11000), pool_slice("p1", 2000, 2005))

# The exact-path kernels over a grid of sizes and statistics.
ks_exact = []
for n1, n2 in [(1, 1), (2, 5), (7, 13), (20, 20), (30, 45), (100, 150), (999, 1000),
               (1000, 1000), (3000, 2000), (10000, 2000), (50, 10000)]:
    g = math.gcd(n1, n2)
    lcm = n1 // g * n2
    # Large statistics on large lattices cost O(n1*n2) and only underflow.
    fracs = [0.0, 0.001, 0.01, 0.03, 0.05, 0.1, 0.2]
    if n1 * n2 <= 10**6:
        fracs += [0.5, 0.8, 1.0]
    for frac in fracs:
        h = int(round(frac * lcm))
        ok, d, p = _attempt_exact_2kssamp(n1, n2, g, h / lcm, "two-sided")
        ks_exact.append({"n1": n1, "n2": n2, "d": h / lcm, "ok": bool(ok),
                         "pvalue": float(p) if np.isfinite(p) else None})

# kstwo.sf / cdf across every branch of _kolmogn (Ruben-Gambino, DMTW,
# Pomeranz, Pelz-Good, 2*smirnov, the cutoffs).
kstwo = []
for n in [1, 2, 3, 5, 10, 50, 140, 141, 500, 5000, 100000, 100001, 1000000, 2000000]:
    nx2 = [0.05, 0.3, 0.754, 0.76, 1.5, 2.19, 2.21, 3, 4, 4.1, 10, 17.9, 18.1, 100, 369, 371]
    if n == 1000000:  # each Smirnov sum takes ~0.1 s here; sample fewer points
        nx2 = [0.3, 2.21, 10, 100]
    xs = {float(np.sqrt(v / n)) for v in nx2}
    xs |= {t / n for t in [0.4, 0.5, 0.75, 1.0, 1.5, 2.5]}
    xs |= {0.3, 0.5, 0.6, 0.9}
    for x in sorted(xs):
        if 0 < x < 1:
            kstwo.append({"n": n, "x": x, "sf": float(stats.kstwo.sf(x, n)),
                          "cdf": float(stats.kstwo.cdf(x, n))})

# ---------------------------------------------------------------- chi-square
chi_cases = []


def chi_case(name, table):
    t = np.asarray(table, dtype=float)
    kept = t[:, t.sum(axis=0) > 0]  # the Go function drops all-zero columns
    stat, p, dof, _ = stats.chi2_contingency(kept, correction=False)
    chi_cases.append({"name": name, "table": [flist(r) for r in t],
                      "statistic": float(stat), "pvalue": float(p), "dof": int(dof)})


chi_case("2x5", [[120, 90, 60, 20, 10], [100, 95, 70, 25, 12]])
chi_case("2x5_zero_columns", [[120, 0, 60, 20, 0], [100, 0, 70, 25, 0]])
chi_case("3x4", [[30, 14, 34, 45], [18, 25, 22, 31], [27, 19, 25, 30]])
chi_case("2x2_no_yates", [[12, 5], [7, 15]])
chi_case("2x1_after_drop", [[5, 0], [7, 0]])
chi_case("1x3_one_row", [[5, 6, 7]])
chi_case("weights", [[10.5, 3.25, 7.0], [8.0, 6.5, 2.75]])
for name, lo in [("2x10_p_1e-12", 0.095), ("2x10_p_1e-49", 0.09), ("2x10_p_underflow", 0.06)]:
    w = np.linspace(lo, 0.2 - lo, 10)
    chi_case(name, np.vstack([rng.multinomial(100000, np.full(10, 0.1)),
                              rng.multinomial(90000, w / w.sum())]))
chi_case("2x6_null", np.vstack([rng.multinomial(5000, np.full(6, 1 / 6)),
                                rng.multinomial(4000, np.full(6, 1 / 6))]))

chi2_ppf = []
for p in [1, 2, 3, 5, 8, 10, 20]:
    for q in [0.5, 0.9, 0.975, 0.99, 0.999]:
        chi2_ppf.append({"p": p, "q": q, "ppf": float(stats.chi2.ppf(q, p)),
                         "isf": float(stats.chi2.isf(q, p))})

# ---------------------------------------------------------------- PSI
EPS = 1e-4


def psi_numeric(ref, cur, bins):
    """The definition the Go PSI implements, in numpy."""
    ref = np.asarray(ref, dtype=float)
    cur = np.asarray(cur, dtype=float)
    edges = np.unique(np.quantile(ref, np.arange(bins + 1) / bins))
    inner = edges[1:-1]  # outer edges become -inf/+inf
    nb = len(inner) + 1
    rc = np.bincount(np.searchsorted(inner, ref, side="right"), minlength=nb)
    cc = np.bincount(np.searchsorted(inner, cur, side="right"), minlength=nb)
    return psi_counts(rc, cc)


def psi_counts(rc, cc):
    r = np.maximum(np.asarray(rc, dtype=float) / np.sum(rc), EPS)
    c = np.maximum(np.asarray(cc, dtype=float) / np.sum(cc), EPS)
    return float(np.sum((c - r) * np.log(c / r)))


psi_cases = []


def psi_case(name, ref, cur, bins):
    specs = []
    arrays = []
    for x in (ref, cur):
        if isinstance(x, tuple):
            specs.append(x[0])
            arrays.append(x[1])
        else:
            x = r6(x)
            specs.append({"values": flist(x)})
            arrays.append(x)
    psi_cases.append({"name": name, "ref": specs[0], "cur": specs[1], "bins": bins,
                      "psi": psi_numeric(arrays[0], arrays[1], bins)})


psi_case("shift", pool_slice("p0", 0, 3000), pool_slice("p1", 0, 2000), 10)
psi_case("null", pool_slice("p0", 0, 2000), pool_slice("p0", 2000, 4000), 10)
psi_case("shift_20_bins", pool_slice("p0", 5000, 9000), pool_slice("p1", 0, 3000), 20)
psi_case("ties_dedup_edges", rng.integers(0, 6, 500).astype(float), rng.integers(0, 8, 400).astype(float), 10)
psi_case("empty_bins", pool_slice("p0", 4000, 5000), rng.normal(5, 1, 300), 10)
psi_case("small", [3.1, 1.2, 5.5, 2.2, 9.0, 4.4, 7.7], [2.0, 6.0, 8.5, 1.0, 3.3], 4)
psi_case("edge_hits_data", np.arange(101.0), np.arange(0.0, 150.0, 1.5), 10)
psi_case("constant_ref", np.full(20, 1.0), rng.normal(1, 1, 30), 10)
psi_case("one_bin", rng.normal(0, 1, 50), rng.normal(3, 1, 50), 1)
psi_case("more_bins_than_values", [1.0, 2.0, 3.0], [1.5, 2.5, 10.0], 20)

psi_cat_cases = []
for name, rc, cc in [
    ("basic", [100, 200, 300], [120, 180, 310]),
    ("zeros", [50, 0, 25, 25], [0, 10, 40, 50]),
    ("both_zero_category", [10, 0, 30], [12, 0, 28]),
    ("identical", [5, 5, 5, 5], [5, 5, 5, 5]),
    ("weights", [0.1, 0.7, 0.2], [0.3, 0.3, 0.4]),
]:
    psi_cat_cases.append({"name": name, "ref": [float(v) for v in rc], "cur": [float(v) for v in cc],
                          "psi": psi_counts(rc, cc)})

# ---------------------------------------------------------------- JS, W1
js_cases = []
for name, p, q in [
    ("probs", [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]),
    ("unnormalized", [1, 2, 3, 4], [4, 3, 2, 1]),
    ("disjoint", [1, 0, 0], [0, 1, 0]),
    ("identical", [0.25, 0.25, 0.5], [0.25, 0.25, 0.5]),
    ("zeros_mixed", [0, 3, 5, 0, 2], [1, 3, 0, 0, 6]),
    ("random50", flist(r6(rng.uniform(0, 1, 50))), flist(r6(rng.uniform(0, 1, 50)))),
]:
    js_cases.append({"name": name, "p": [float(v) for v in p], "q": [float(v) for v in q],
                     "js": float(distance.jensenshannon(p, q))})

w_cases = []
for name, a, b in [
    ("shifted", [0.0, 1.0, 3.0], [5.0, 6.0, 8.0]),
    ("normal", r6(rng.normal(0, 1, 100)), r6(rng.normal(1, 2, 150))),
    ("ties", rng.integers(0, 4, 30).astype(float), rng.integers(1, 5, 45).astype(float)),
    ("one_vs_ten", [2.5], r6(rng.uniform(0, 5, 10))),
    ("identical", [1.0, 2.0, 2.0, 7.0], [7.0, 2.0, 1.0, 2.0]),
]:
    w_cases.append({"name": name, "a": flist(a), "b": flist(b),
                    "w": float(stats.wasserstein_distance(a, b))})

# ---------------------------------------------------------------- MCD
# Only data whose MCD optimum is unique can be compared: the Go and numpy
# random starts differ. A dataset is kept only if 100 sklearn seeds (40 for
# the n=600 one, whose fits are slow) all find the same raw support.
mcd_cases = []


def mcd_case(name, X, probe):
    m = MinCovDet(random_state=0).fit(X)
    probe = r6(probe)
    mcd_cases.append({
        "name": name, "n": X.shape[0], "p": X.shape[1], "x": flist(X),
        "raw_location": flist(m.raw_location_), "raw_covariance": flist(m.raw_covariance_),
        "raw_support": [bool(v) for v in m.raw_support_],
        "location": flist(m.location_), "covariance": flist(m.covariance_),
        "support": [bool(v) for v in m.support_], "dist": flist(m.dist_),
        "probe": [flist(r) for r in probe], "probe_mahalanobis": flist(m.mahalanobis(probe)),
    })


def gen_unique(name, make, probe_dim, tries=20, seeds=100):
    for _ in range(tries):
        X = r6(make())
        sups = set()
        for s in range(seeds):
            sups.add(MinCovDet(random_state=s).fit(X).raw_support_.tobytes())
            if len(sups) > 1:
                break
        if len(sups) == 1:
            mcd_case(name, X, rng.normal(0, 3, (5, probe_dim)))
            return
    raise SystemExit(f"{name}: no unique-optimum dataset in {tries} tries")


cov3 = np.array([[1.0, 0.5, 0.2], [0.5, 2.0, 0.3], [0.2, 0.3, 0.5]])
gen_unique("n200_p3_outliers", lambda: np.vstack([rng.multivariate_normal([0, 0, 0], cov3, 180),
                                                 rng.normal(20, 1, (20, 3))]), 3)
gen_unique("n100_p2_outliers", lambda: np.vstack([rng.multivariate_normal([1, -1], [[1, 0.8], [0.8, 1]], 85),
                                                 rng.normal([15, -15], 1, (15, 2))]), 2)
gen_unique("n600_p2_subsets", lambda: np.vstack([rng.multivariate_normal([0, 0], [[2, 0.3], [0.3, 1]], 540),
                                                rng.normal([30, 30], 2, (60, 2))]), 2, seeds=40)
gen_unique("n150_p1", lambda: np.concatenate([rng.normal(0, 1, 135), rng.normal(50, 1, 15)])[:, None], 1)

# ---------------------------------------------------------------- Ledoit-Wolf
lw_cases = []


def lw_case(name, X, centered):
    cov, shrink = ledoit_wolf(X, assume_centered=centered)
    lw_cases.append({"name": name, "n": X.shape[0], "p": X.shape[1], "x": flist(X), "centered": centered,
                     "covariance": flist(cov), "shrinkage": float(shrink)})


lw_case("n200_p5", r6(rng.multivariate_normal(np.zeros(5), np.diag([1, 2, 3, 0.5, 0.1]), 200)), False)
lw_case("n30_p40_centered", r6(rng.normal(0, 1, (30, 40))), True)
lw_case("n100_p8_correlated", r6(rng.normal(0, 1, (100, 8)) @ rng.normal(0, 1, (8, 8)) + 3), False)

golden = {
    "pools": {k: flist(v) for k, v in pools.items()},
    "ks": ks_cases, "ks_exact": ks_exact, "kstwo": kstwo,
    "chisquare": chi_cases, "chi2_quantiles": chi2_ppf,
    "psi": psi_cases, "psi_categorical": psi_cat_cases,
    "jensenshannon": js_cases, "wasserstein": w_cases,
    "mcd": mcd_cases,
    "ledoit_wolf": lw_cases,
}
with open(OUT, "w") as f:
    json.dump(golden, f, separators=(",", ":"))
    f.write("\n")
print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes")
