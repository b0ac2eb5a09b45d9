"""fusemath.random's statistics beyond test_random.py: every continuous distribution at 10^7 samples
(slow; test_random.py keeps the 10^6 run), chi-square for integers (small, huge and non-power-of-two
ranges) and poisson (both lam ranges of both modes), each with a planted bug that the same check must
catch, and dieharder on the raw stream (slow; skipped without the dieharder package).

Slow tests run with `pytest --run-slow` (conftest.py)."""
import shutil

import numpy as np
import pytest
from scipy import stats

import fusemath.random as fr
from test_random import DISTS, P_MIN, check_dist

TAG_INTEGERS, TAG_POISSON = 0x696E7431, 0x706F6931  # fusion/philox_portable.h's sub-stream tags
N = 1_000_000


def philox(c0, c1, c2, c3, seed, rounds=10):
    """Philox4x32-`rounds` words (n, 4) of counters {c0, c1, c2, c3} (arrays), key = seed: an
    implementation independent of the library's."""
    m32 = np.uint64(0xFFFFFFFF)
    c = [np.asarray(x, dtype=np.uint64) & m32 for x in np.broadcast_arrays(c0, c1, c2, c3)]
    k0, k1 = seed & 0xFFFFFFFF, seed >> 32
    for _ in range(rounds):
        p0, p1 = c[0] * np.uint64(0xD2511F53), c[2] * np.uint64(0xCD9E8D57)
        n0, n2 = (p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1)
        c = [n0, p1 & m32, n2, p0 & m32]
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return np.stack(c, axis=1)


def words32(seed, n, rounds=10):
    """The portable stream's first n 32-bit words (random_raw's), as uint64."""
    b = np.arange((n + 3) // 4, dtype=np.uint64)
    return philox(b, b >> np.uint64(32), 0, 0, seed, rounds).reshape(-1)[:n]


def chi2_p(counts, expected):
    counts, expected = np.asarray(counts, float), np.asarray(expected, float)
    return stats.chisquare(counts, expected * counts.sum() / expected.sum()).pvalue


def binned_uniform_p(v, low, r, bins):
    """chi-square p of v (integers in [low, low + r)) in `bins` equal-width bins (exact edges)."""
    off = (np.asarray(v).astype(object) - low) if r > 2**62 else (np.asarray(v, np.int64) - low)
    idx = np.array([int(x) * bins // r for x in off]) if r > 2**62 else (off.astype(np.float64) * bins / r).astype(np.int64)
    edges = [(-(-(i * r) // bins)) for i in range(bins + 1)]  # ceil(i r / bins): bin i holds [e_i, e_i+1)
    sizes = np.diff(np.array(edges, dtype=object)).astype(np.float64)
    return chi2_p(np.bincount(idx, minlength=bins), sizes)


# ---------------------------------------------------------------------------
# continuous: 10^7 samples, moments + Kolmogorov-Smirnov + serial
# ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(DISTS))
def test_continuous_1e7(name, dtype):
    draw, dist, mean, var = DISTS[name]
    x = draw(fr.default_rng(1207), 10_000_000, dtype)
    assert check_dist(x, dist, mean, var, f"{name} {np.dtype(dtype)} 1e7") == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["uniform", "normal", "lognormal"])
def test_continuous_1e7_curand(name):
    draw, dist, mean, var = DISTS[name]
    x = draw(fr.default_rng(1208, mode="curand"), 10_000_000, np.float32)
    assert check_dist(x, dist, mean, var, f"curand {name} 1e7") == []


# ---------------------------------------------------------------------------
# integers
# ---------------------------------------------------------------------------
INT_CASES = [  # (low, high exclusive, dtype, bins): small, not a power of two, rejection-heavy, huge
    (0, 10, np.int64, 10),
    (-5, 6, np.int32, 11),
    (0, 1000, np.int16, 1000),
    (0, 3 * 2**30, np.int64, 12),  # x % n would give [0, 2^30) twice the weight
    (7, 7 + 2**31 + 1, np.int64, 16),  # half the words rejected
    (0, 3 * 2**61, np.int64, 12),  # 64-bit words; x % n: [0, 2^62) 1.5x the weight
    (-(2**63), 2**63 - 1, np.int64, 64),  # (almost) the whole int64 range
]


@pytest.mark.parametrize("low, high, dtype, bins", INT_CASES)
def test_integers_chi_square(low, high, dtype, bins):
    g = fr.default_rng(424242)
    v = g.integers(low, high, N, dtype=dtype)
    assert v.dtype == dtype and v.min() >= low and v.max() < high
    r = high - low
    p = binned_uniform_p(v, low, r, bins)
    assert p > P_MIN, f"[{low}, {high}) chi-square p = {p:.3g}"
    if r > 1000:  # the low bits too (a range's bottom bits show a bad multiply-shift)
        for m in (2, 7):
            p = chi2_p(np.bincount((np.asarray(v).astype(object) % m).astype(np.int64), minlength=m), [1] * m)
            assert p > P_MIN, f"[{low}, {high}) mod {m}: p = {p:.3g}"


@pytest.mark.parametrize("r, wide", [(3 * 2**30, False), (3 * 2**61, True)])
def test_integers_planted_modulo_bias_fails(r, wide):
    """`word % r` over the same stream words (the bias Lemire's rejection removes) fails the check the
    library passes."""
    w = words32(99, 2 * N)
    w = (w[0::2] | (w[1::2] << np.uint64(32))) if wide else w[:N]
    biased = (w % np.uint64(r)).astype(np.uint64)
    assert binned_uniform_p(biased.astype(object) if wide else biased.astype(np.int64), 0, r, 12) < P_MIN
    good = fr.default_rng(99).integers(0, r, N)
    assert binned_uniform_p(good, 0, r, 12) > P_MIN


def test_integers_endpoint_and_full_range():
    g = fr.default_rng(5)
    v = g.integers(-3, 3, 60_000, endpoint=True, dtype=np.int8)
    assert set(np.unique(v)) == set(range(-3, 4))
    assert chi2_p(np.bincount(v + 3), [1] * 7) > P_MIN
    # 2^64 values: low + the words themselves (64-bit halves of the stream as the f64 kinds)
    full = fr.default_rng(6).integers(-(2**63), 2**63 - 1, 1000, endpoint=True)
    w = words32(6, 2000)
    np.testing.assert_array_equal(full.view(np.uint64) ^ np.uint64(2**63), w[0::2] | (w[1::2] << np.uint64(32)))
    # [0, 2^32) as int64: the 32-bit words (random_raw's)
    np.testing.assert_array_equal(fr.default_rng(8).integers(0, 2**32, 1000), words32(8, 1000).astype(np.int64))


# ---------------------------------------------------------------------------
# poisson
# ---------------------------------------------------------------------------
def poisson_p(v, lam):
    """chi-square p of v against Poisson(lam): every k with expected count >= 20, the tails pooled."""
    v = np.asarray(v, np.int64)
    n = v.size
    lo, hi = int(stats.poisson.ppf(1e-9, lam)), int(stats.poisson.isf(1e-9, lam)) + 1
    ks = np.arange(lo, hi + 1)
    pmf = stats.poisson.pmf(ks, lam)
    keep = ks[pmf * n >= 20]
    a, b = keep.min(), keep.max()
    counts = [np.count_nonzero(v < a)] + list(np.bincount(v[(v >= a) & (v <= b)] - a, minlength=b - a + 1))
    counts.append(np.count_nonzero(v > b))
    exp = [stats.poisson.cdf(a - 1, lam)] + list(stats.poisson.pmf(np.arange(a, b + 1), lam))
    exp.append(stats.poisson.sf(b, lam))
    counts, exp = np.array(counts, float), np.array(exp)
    if counts[exp == 0].any():  # a value Poisson(lam) never gives (below 0)
        return 0.0
    return chi2_p(counts[exp > 0], exp[exp > 0])


@pytest.mark.parametrize("mode, lam", [
    ("portable", 0.5), ("portable", 3.7), ("portable", 9.99),  # inversion
    ("portable", 10.0), ("portable", 47.5), ("portable", 1000.0), ("portable", 1e5),  # PTRS
    ("curand", 0.5), ("curand", 3.7), ("curand", 100.0), ("curand", 1999.0),  # curand's alias table
])
def test_poisson_chi_square(mode, lam):
    v = fr.default_rng(31337, mode=mode).poisson(lam, N)
    assert v.dtype == np.int64 and v.min() >= 0
    assert poisson_p(v, lam) > P_MIN
    assert abs(v.mean() - lam) < 6 * np.sqrt(lam / N)
    assert abs(v.var() - lam) < 6 * lam * np.sqrt((2 + 1 / lam) / N)


@pytest.mark.parametrize("lam", [2000.0, 5000.0, 1e5, 4e5])
def test_poisson_curand_normal_method(lam):
    """cuRAND's lam >= 2000: the normal approximation (unsigned)(sqrt(lam) z + lam + 0.5): its moments
    are Poisson's; it is not exact (skewness 0, not lam^-1/2), so the chi-square is against what it
    is, the rounded normal."""
    v = fr.default_rng(2718, mode="curand").poisson(lam, N)
    assert abs(v.mean() - lam) < 6 * np.sqrt(lam / N)
    assert abs(v.var() - (lam + 1 / 12)) < 6 * lam * np.sqrt(2 / N)
    s = np.sqrt(lam)
    ks = np.arange(int(lam - 5 * s), int(lam + 5 * s))
    pmf = stats.norm.cdf(ks + 0.5, lam, s) - stats.norm.cdf(ks - 0.5, lam, s)
    inside = (v >= ks[0]) & (v <= ks[-1])
    assert chi2_p(np.bincount(v[inside] - ks[0], minlength=ks.size), pmf) > P_MIN


def test_poisson_zero_and_scalar():
    g = fr.default_rng(1)
    assert not g.poisson(0.0, 1000).any()
    x = g.poisson(2.5)
    assert type(x) is int and x >= 0
    assert g.state["position"] == 1001


def curand_alias_table(lam):
    """libcurand's lam < 2000 table, rebuilt from ../shared/RNG-PHILOX.md's description in Python."""
    p, S, k, shift = [], 0.0, 0, None
    while True:
        if k > 0:
            S += np.log(k)
        pk = float(np.exp(k * np.log(lam) - lam - S))
        if pk != 0.0:
            shift = k if shift is None else shift
            p.append(pk)
        elif shift is not None:
            break
        k += 1
    L = len(p)
    a = 1.0 / L
    K, V, done = list(range(L)), [0.0] * L, [False] * L
    g = max(i for i in range(L) if p[i] >= a)
    changed = True
    while changed and g >= 0:
        changed = False
        for j in range(L):
            if g < 0:
                break
            if not done[j] and p[j] < a:
                K[j], V[j] = g, j * a + p[j]
                p[g] -= a - p[j]
                p[j], done[j], changed = a, True, True
                while g >= 0 and (done[g] or p[g] < a):
                    g -= 1
    for j in range(L):
        if not done[j]:
            V[j] = j * a + p[j]
    return shift, np.array(K), np.array(V)


def alias_sample(words, shift, K, V):
    u = words.astype(np.float64) * 2.0**-32 + 2.0**-32
    j = np.minimum((len(K) * u).astype(np.int64), len(K) - 1)
    return shift + np.where(u < V[j], j, K[j])


def test_poisson_planted_wrong_table_entry_fails():
    """curand mode's alias table rebuilt in Python reproduces fusemath's values from the raw curand words;
    with one entry of it wrong the chi-square fails."""
    lam, seed = 3.7, 555
    w = fr.default_rng(seed, mode="curand").random_raw(N).astype(np.uint64)
    shift, K, V = curand_alias_table(lam)
    good = alias_sample(w, shift, K, V)
    np.testing.assert_array_equal(good, fr.default_rng(seed, mode="curand").poisson(lam, N))
    assert poisson_p(good, lam) > P_MIN
    j = int(np.argmin(V - np.arange(len(V)) / len(V)))  # the slot whose alias holds the most
    K2 = K.copy()
    K2[j] += 1  # that alias one k off: 1 / L of the mass (0.4%) moved to the next k
    assert poisson_p(alias_sample(w, shift, K2, V), lam) < P_MIN


def portable_poisson_inversion(seed, n, lam, bug_k=None):
    """The portable lam < 10 method in NumPy: u from each value's sub-stream block 0, inversion of the
    cdf; bug_k: the term of that k doubled (the planted bug)."""
    m = np.arange(n, dtype=np.uint64)
    b = philox(m, m >> np.uint64(32), 0, TAG_POISSON, seed)
    u = ((b[:, 0] | (b[:, 1] << np.uint64(32))) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    pk, F, k = np.exp(-lam), [], 0
    f = pk
    while pk > 0:
        F.append(f)
        k += 1
        pk = pk * lam / k
        f += pk * (2 if k == bug_k else 1)
    return np.searchsorted(np.array(F), u, side="right")


def test_poisson_planted_wrong_cdf_term_fails():
    lam, seed = 3.7, 777
    good = portable_poisson_inversion(seed, N, lam)
    got = fr.default_rng(seed).poisson(lam, N)
    assert np.mean(good == got) > 0.9999  # the same method (cdf sums may differ in the last ulp)
    assert poisson_p(good, lam) > P_MIN
    assert poisson_p(portable_poisson_inversion(seed, N, lam, bug_k=5), lam) < P_MIN


def test_integers_planted_weak_philox_fails():
    """Lemire over a 2-round Philox: the range's pairs of consecutive values are far from independent."""
    r = 16
    bad = (words32(3, N, rounds=2) * np.uint64(r)) >> np.uint64(32)
    good = fr.default_rng(3).integers(0, r, N)
    np.testing.assert_array_equal(good, (words32(3, N) * np.uint64(r)) >> np.uint64(32))  # no rejection at r = 16

    def pairs_p(v):
        v = np.asarray(v, np.int64)
        return chi2_p(np.bincount(v[0::2] * r + v[1::2], minlength=r * r), [1] * (r * r))

    assert pairs_p(good) > P_MIN
    assert pairs_p(bad) < P_MIN


# ---------------------------------------------------------------------------
# dieharder on the raw 32-bit stream
# ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("dieharder") is None, reason="dieharder not installed (scripts/setup.sh tries apt-get)")
def test_dieharder():
    import dieharder_feed

    text, counts, secs = dieharder_feed.run()
    print(text, counts, secs)
    assert counts["PASSED"] > 50, text
    assert counts["FAILED"] == 0, text


def portable_poisson_ptrs(seed, n, lam, bug=False):
    """The portable lam >= 10 method (PTRS, Hormann 1993) in NumPy with SciPy's gammaln: try j of
    value m from its sub-stream block j; bug: log k! taken as log (k - 1)! (the planted bug)."""
    from scipy.special import gammaln

    slam, loglam = np.sqrt(lam), np.log(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    invalpha, vr = 1.1239 + 1.1328 / (b - 3.4), 0.9277 - 3.6224 / (b - 2)
    out = np.full(n, -1, np.int64)
    todo = np.arange(n, dtype=np.uint64)
    for j in range(64):
        if todo.size == 0:
            break
        w = philox(todo, todo >> np.uint64(32), j, TAG_POISSON, seed)
        u = ((w[:, 0] | (w[:, 1] << np.uint64(32))) >> np.uint64(11)).astype(np.float64) * 2.0**-53 - 0.5
        v = ((w[:, 2] | (w[:, 3] << np.uint64(32))) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        us = 0.5 - np.abs(u)
        with np.errstate(divide="ignore", invalid="ignore"):
            x = (2 * a / us + b) * u + lam + 0.43
            k = np.floor(np.where(np.isfinite(x), x, -1.0))
            ok = (us >= 0.07) & (v <= vr)
            rej = (k < 0) | ((us < 0.013) & (v > us)) | (us == 0)
            lhs = np.log(v) + np.log(invalpha) - np.log(a / (us * us) + b)
            rhs = -lam + k * loglam - gammaln(np.maximum(k, 0) + (0 if bug else 1))
        acc = ~rej & (ok | (lhs <= rhs))
        out[todo[acc].astype(np.int64)] = k[acc].astype(np.int64)
        todo = todo[~acc]
    return out


@pytest.mark.parametrize("lam", [10.0, 250.0])
def test_poisson_planted_ptrs_bug_fails(lam):
    """PTRS in NumPy agrees with the portable mode (the same method, SciPy's log-gamma); with log k!
    one term short in its acceptance test the chi-square fails."""
    seed, n = 4242, 400_000
    good = portable_poisson_ptrs(seed, n, lam)
    got = fr.default_rng(seed).poisson(lam, n)
    assert np.mean(good == got) > 0.999
    assert poisson_p(good, lam) > P_MIN
    assert poisson_p(portable_poisson_ptrs(seed, n, lam, bug=True), lam) < P_MIN
