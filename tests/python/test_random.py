"""fusemath.random: statistics (moments, Kolmogorov-Smirnov, serial correlation) with thresholds shown
to reject planted bugs, the portable stream against an independent NumPy Philox, curand mode against
libcurand's host generator (ctypes; skipped where it is absent), thread-count invariance, positions,
state, spawn, pickling, and every bad argument's exception type and message."""
import ctypes
import ctypes.util
import glob
import pickle

import numpy as np
import pytest
from scipy import stats

import fusemath
import fusemath.random as fr

N_STAT = 1_000_000


# ---------------------------------------------------------------------------
# An independent Philox4x32 in NumPy (rounds as a parameter: the planted bug) and the portable
# mode's documented mapping (fusemath.h, FM_RNG_PORTABLE)
# ---------------------------------------------------------------------------
def philox_np(blocks, seed, rounds=10):
    """Words (n, 4) of Philox4x32-`rounds` for counters {lo(b), hi(b), 0, 0}, key = seed."""
    b = np.asarray(blocks, dtype=np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    c0, c1 = b & m32, b >> np.uint64(32)
    c2 = c3 = np.zeros_like(b)
    k0, k1 = seed & 0xFFFFFFFF, seed >> 32
    for _ in range(rounds):
        p0, p1 = c0 * np.uint64(0xD2511F53), c2 * np.uint64(0xCD9E8D57)
        n0, n2 = (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1)
        c0, c1, c2, c3 = n0, p1 & m32, n2, p0 & m32
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.uint32)


def portable_uniform_f64(seed, pos, n, rounds=10):
    m = np.arange(pos, pos + n, dtype=np.uint64)
    w = philox_np(m // np.uint64(2), seed, rounds).astype(np.uint64)
    half = (m % np.uint64(2)).astype(np.int64) * 2
    rows = np.arange(n)
    word = w[rows, half] | (w[rows, half + 1] << np.uint64(32))
    return (word >> np.uint64(11)).astype(np.float64) * 2.0**-53


def planted_normal_f64(seed, n, rounds):
    """Box-Muller over the portable stream's words with NumPy's log / sin / cos (statistically what
    fusemath computes) on a Philox of `rounds` rounds."""
    w = philox_np(np.arange((n + 1) // 2, dtype=np.uint64), seed, rounds).astype(np.uint64)
    wu, wt = w[:, 0] | (w[:, 1] << np.uint64(32)), w[:, 2] | (w[:, 3] << np.uint64(32))
    u = ((wu >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53
    t = wt.astype(np.float64) * 2.0**-64 * 2 * np.pi
    r = np.sqrt(-2 * np.log(u))
    return np.stack([r * np.sin(t), r * np.cos(t)], axis=1).reshape(-1)[:n]


# ---------------------------------------------------------------------------
# The statistical checks: each returns a list of what failed ([] = passes)
# ---------------------------------------------------------------------------
P_MIN = 1e-6  # deterministic seeds: a correct generator passes by a wide margin, a planted bug gives p ~ 0


def _moments(x, mean, var, name):
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    bad = []
    if abs(x.mean() - mean) > 6 * np.sqrt(var / n):
        bad.append(f"{name}: mean {x.mean():.6g}, expected {mean:.6g}")
    if abs(x.var() - var) > 6 * var * np.sqrt(3.0 / n) + 1e-12:  # the sample variance's sd <= var sqrt(3/n)
        bad.append(f"{name}: variance {x.var():.6g}, expected {var:.6g}")
    return bad


def _serial(x, name):
    """Lag-1 correlation of consecutive values, and a 16 x 16 chi-square on their ranks."""
    x = np.asarray(x, dtype=np.float64)
    bad = []
    r = np.corrcoef(x[:-1], x[1:])[0, 1]
    if abs(r) > 6 / np.sqrt(x.size):
        bad.append(f"{name}: lag-1 correlation {r:.3g}")
    q = np.minimum((stats.rankdata(x, method="ordinal") - 1) * 16 // x.size, 15).astype(np.int64)
    pairs = np.bincount(q[:-1:2] * 16 + q[1::2], minlength=256)
    p = stats.chisquare(pairs).pvalue
    if p < P_MIN:
        bad.append(f"{name}: pairs chi-square p = {p:.3g}")
    return bad


def check_dist(x, dist, mean, var, name):
    x = np.asarray(x, dtype=np.float64)
    bad = []
    if not np.all(np.isfinite(x)):
        bad.append(f"{name}: non-finite values")
        return bad
    p = stats.kstest(x, dist.cdf).pvalue
    if p < P_MIN:
        bad.append(f"{name}: Kolmogorov-Smirnov p = {p:.3g}")
    return bad + _moments(x, mean, var, name) + _serial(x, name)


LOGN_SIGMA = 0.5
DISTS = {
    "uniform": (lambda g, n, dt: g.uniform(-2.0, 3.0, n, dtype=dt), stats.uniform(-2, 5), 0.5, 25 / 12),
    "normal": (lambda g, n, dt: g.normal(1.5, 2.0, n, dtype=dt), stats.norm(1.5, 2.0), 1.5, 4.0),
    "lognormal": (lambda g, n, dt: g.lognormal(0.0, LOGN_SIGMA, n, dtype=dt), stats.lognorm(LOGN_SIGMA),
                  np.exp(LOGN_SIGMA**2 / 2), (np.exp(LOGN_SIGMA**2) - 1) * np.exp(LOGN_SIGMA**2)),
    "exponential": (lambda g, n, dt: g.exponential(3.0, n, dtype=dt), stats.expon(scale=3.0), 3.0, 9.0),
}


@pytest.mark.parametrize("mode", ["portable", "curand"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(DISTS))
def test_statistics(mode, dtype, name):
    if mode == "curand" and name == "exponential":
        pytest.skip("curand mode has no exponential (test_bad_arguments checks the error)")
    draw, dist, mean, var = DISTS[name]
    g = fr.default_rng(20261202, mode=mode)
    g.advance(12345)
    x = draw(g, N_STAT, dtype)
    assert x.dtype == dtype and x.shape == (N_STAT,)
    assert check_dist(x, dist, mean, var, f"{mode} {name} {np.dtype(dtype)}") == []


def test_statistics_large_sample():
    """10^7 float32 normals: the tails and the float arithmetic of Box-Muller at a finer resolution."""
    x = fr.default_rng(7).standard_normal(10_000_000, dtype=np.float32)
    assert check_dist(x, stats.norm(), 0.0, 1.0, "standard_normal f32 1e7") == []
    assert abs(x).max() > 5.0  # the tails are there (P(|z| > 5) n ~ 5.7)


def test_independent_philox_matches():
    """The NumPy Philox reproduces fusemath's portable uniforms bit for bit (so the planted-bug
    generator below is fusemath's stream with only the bug changed)."""
    seed, pos = 0xDEADBEEF12345678, 999
    got = fr.Generator(seed).advance(pos).random(10001)
    np.testing.assert_array_equal(got, portable_uniform_f64(seed, pos, 10001))


@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_planted_bug_fails_the_checks(rounds):
    """Philox with fewer rounds over the same mapping must fail the same checks the real stream
    passes. (One round removed, 9 rounds, is beyond any such test: Philox4x32 passes TestU01's
    BigCrush from 7 rounds on, Salmon et al. 2011; the checks' power shows on the weak variants.)"""
    seed = 20261202
    u = portable_uniform_f64(seed, 0, N_STAT, rounds)
    z = planted_normal_f64(seed, N_STAT, rounds)
    bad = check_dist(u, stats.uniform(), 0.5, 1 / 12, "uniform") + check_dist(z, stats.norm(), 0, 1, "normal")
    assert bad, f"{rounds} rounds passed every check"
    # ... and the full 10 rounds pass them
    u10 = portable_uniform_f64(seed, 0, N_STAT)
    assert check_dist(u10, stats.uniform(), 0.5, 1 / 12, "uniform") == []


def test_planted_mapping_bugs_fail():
    """Bugs in the arithmetic after Philox: a uniform one bit short, Box-Muller's angle halved,
    an exponential of the wrong scale."""
    g = fr.default_rng(3)
    u = g.random(N_STAT)
    assert check_dist(u * 0.5, stats.uniform(), 0.5, 1 / 12, "u/2")
    z = g.standard_normal(N_STAT)
    assert check_dist(np.abs(z), stats.norm(), 0, 1, "|z|")  # sin of a halved angle: never negative
    e = g.standard_exponential(N_STAT)
    assert check_dist(e * 1.01, stats.expon(), 1, 1, "1.01 e")


# ---------------------------------------------------------------------------
# curand mode against libcurand's host generator
# ---------------------------------------------------------------------------
def _libcurand():
    names = [ctypes.util.find_library("curand")] + sorted(glob.glob("/usr/local/cuda*/lib64/libcurand.so*"))
    for name in names:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        g = ctypes.c_void_p()
        if lib.curandCreateGeneratorHost(ctypes.byref(g), 161) == 0:  # CURAND_RNG_PSEUDO_PHILOX4_32_10
            lib.curandDestroyGenerator(g)
            return lib
    return None


CURAND = _libcurand()


def _curand_draw(lib, g, kind, n):
    dt = {"raw": np.uint32, "f": np.float32, "d": np.float64}
    out = np.empty(n, dt[kind[-1]] if kind != "raw" else np.uint32)
    ptr, size = out.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(n)
    f, d = ctypes.c_float, ctypes.c_double
    calls = {
        "raw": lambda: lib.curandGenerate(g, ptr, size),
        "uniform_f": lambda: lib.curandGenerateUniform(g, ptr, size),
        "uniform_d": lambda: lib.curandGenerateUniformDouble(g, ptr, size),
        "normal_f": lambda: lib.curandGenerateNormal(g, ptr, size, f(0.5), f(2.0)),
        "normal_d": lambda: lib.curandGenerateNormalDouble(g, ptr, size, d(0.5), d(2.0)),
        "lognormal_f": lambda: lib.curandGenerateLogNormal(g, ptr, size, f(0.5), f(2.0)),
        "lognormal_d": lambda: lib.curandGenerateLogNormalDouble(g, ptr, size, d(0.5), d(2.0)),
    }
    assert calls[kind]() == 0
    return out


def _fm_draw(gen, kind, n):
    dt = np.float32 if kind.endswith("_f") else np.float64
    if kind == "raw":
        return gen.random_raw(n)
    if kind.startswith("uniform"):
        return gen.random(n, dtype=dt)
    if kind.startswith("normal"):
        return gen.normal(0.5, 2.0, n, dtype=dt)
    return gen.lognormal(0.5, 2.0, n, dtype=dt)


@pytest.mark.skipif(CURAND is None, reason="libcurand (CUDA toolkit) not found: test_rng_cpu.c says the same")
@pytest.mark.parametrize("offset", [0, 3, 262141])
def test_curand_mode_matches_libcurand(offset):
    """A Generator in curand mode tracks cuRAND's state through a sequence of calls: float64 calls
    (their shift), then 32-bit ones; every value equal."""
    seed = 0x0123456789ABCDEF
    g = ctypes.c_void_p()
    assert CURAND.curandCreateGeneratorHost(ctypes.byref(g), 161) == 0
    try:
        assert CURAND.curandSetPseudoRandomGeneratorSeed(g, ctypes.c_ulonglong(seed)) == 0
        assert CURAND.curandSetGeneratorOffset(g, ctypes.c_ulonglong(offset)) == 0
        gen = fr.Generator(seed, mode="curand")
        gen.state = {"seed": seed, "position": offset}
        for kind, n in [("uniform_d", 1001), ("normal_d", 262150), ("lognormal_d", 6), ("uniform_f", 999),
                        ("normal_f", 1000), ("raw", 7), ("lognormal_f", 300002)]:
            want = _curand_draw(CURAND, g, kind, n)
            got = _fm_draw(gen, kind, n)
            assert got.tobytes() == want.tobytes(), f"{kind} of {n} at position {gen.state['position'] - n}"
    finally:
        CURAND.curandDestroyGenerator(g)


# ---------------------------------------------------------------------------
# Threads, positions, state, spawn, pickling
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["portable", "curand"])
def test_thread_count_invariance(mode, restore_threads):
    def draws():
        g = fr.default_rng(99, mode=mode).advance(3)
        out = [g.random(300001, dtype=np.float32), g.standard_normal(200003), g.lognormal(size=70001),
               g.random_raw(100003)]
        if mode == "portable":
            out.append(g.exponential(2.0, 100001, dtype=np.float32))
        return b"".join(a.tobytes() for a in out)

    fusemath.set_num_threads(1)
    ref = draws()
    for t in (2, 7):
        fusemath.set_num_threads(t)
        assert draws() == ref, f"{t} threads"


def test_threads_sharing_a_generator_get_disjoint_positions():
    from concurrent.futures import ThreadPoolExecutor

    g = fr.default_rng(17)
    with ThreadPoolExecutor(8) as pool:
        parts = list(pool.map(lambda _: g.standard_normal(1000), range(400)))
    assert g.state["position"] == 400_000
    whole = fr.default_rng(17).standard_normal(400_000)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.sort(whole))


def test_advance_equals_draw_and_discard():
    for kind in ("random", "standard_normal", "standard_exponential", "random_raw"):
        for n in (0, 1, 5, 262147):
            a, b = fr.default_rng(5), fr.default_rng(5)
            getattr(a, kind)(n)
            b.advance(n)
            assert a.state == b.state
            np.testing.assert_array_equal(getattr(a, kind)(1001), getattr(b, kind)(1001))
    # curand mode: advancing is drawing float32 values (the float64 run is kept)
    a, b = fr.default_rng(5, mode="curand"), fr.default_rng(5, mode="curand")
    a.random(10), b.random(10)
    a.random(7, dtype=np.float32)
    b.advance(7)
    f32 = np.float32
    np.testing.assert_array_equal(a.standard_normal(64, dtype=f32), b.standard_normal(64, dtype=f32))


def test_positions_compose_and_large():
    whole = fr.default_rng(8).advance(1000).standard_normal(5000)
    part = fr.default_rng(8).advance(1000 + 1237).standard_normal(77)
    np.testing.assert_array_equal(part, whole[1237:1314])
    g = fr.default_rng(8).advance(2**62 + 1)  # 64-bit positions
    x = g.random(9)
    assert g.state["position"] == 2**62 + 10 and np.all((x >= 0) & (x < 1))


def test_each_call_advances_by_its_count_and_scalars():
    g = fr.default_rng(1)
    x = g.random()
    assert isinstance(x, float) and 0 <= x < 1 and g.state["position"] == 1
    g.random((3, 4), dtype=np.float32)
    assert g.state["position"] == 13
    out = np.empty((2, 5))
    assert g.normal(size=(2, 5), out=out) is out and g.state["position"] == 23
    assert g.random(out=np.empty(0)).shape == (0,) and g.state["position"] == 23
    assert g.uniform(1, 2, size=(2, 0)).shape == (2, 0)


def test_state_spawn_pickle():
    g = fr.default_rng(12345)
    g.random(10)
    s = g.state
    a = g.random(100)
    g.state = s
    np.testing.assert_array_equal(g.random(100), a)
    kids = g.spawn(3)
    def derived(key):
        return int(np.random.SeedSequence(12345, spawn_key=key).generate_state(1, np.uint64)[0])

    seeds = [derived((i,)) for i in range(3)]
    assert [k.state["seed"] for k in kids] == seeds
    more = g.spawn(1)[0]  # numbering goes on
    assert more.state["seed"] == derived((3,))
    grandkid = kids[0].spawn(1)[0]
    assert grandkid.state["seed"] == derived((0, 0))
    draws = [k.random(1000) for k in kids + [g]]
    for i in range(4):
        for j in range(i):
            assert not np.array_equal(draws[i], draws[j])
    h = pickle.loads(pickle.dumps(g))
    assert h.state == g.state
    np.testing.assert_array_equal(h.standard_normal(50), g.standard_normal(50))
    assert fr.default_rng().state["seed"] != fr.default_rng().state["seed"]  # os.urandom
    assert fr.default_rng(g) is g


def test_spawned_generators_share_one_plan():
    """The seed is a per-call argument: 200 children drawing the same shape add one cached plan,
    and each child's values are its own seed's (the plan does not keep the first caller's key)."""
    fusemath.clear_cache()
    kids = fr.default_rng(7).spawn(200)
    draws = [k.random(16) for k in kids]
    assert fusemath.cache_size() == 1
    np.testing.assert_array_equal(draws[123], fr.default_rng(kids[123].state["seed"]).random(16))
    assert len({d.tobytes() for d in draws}) == 200


# ---------------------------------------------------------------------------
# Bad arguments: type and message
# ---------------------------------------------------------------------------
R = fr.default_rng


@pytest.mark.parametrize(
    "call, exc, text",
    [
        (lambda: R(-1), ValueError, "seed = -1, expected an int in [0, 2**64)"),
        (lambda: R(2**64), ValueError, "seed = 18446744073709551616"),
        (lambda: R(1.5), TypeError, "seed must be None or an int in [0, 2**64), not float"),
        (lambda: R(1, mode="fast"), fusemath.InvalidArgumentError, "mode = 'fast', expected"),
        (lambda: R(1, device="gpu"), ValueError, "device = 'gpu', expected 'cpu', 'cuda', 'cuda:N' (N >= 0) or 'best'"),
        (lambda: R(1, device=1), TypeError, "device must be a string"),
        (lambda: R(1).random(-2), ValueError, "random: size = -2 has a negative entry"),
        (lambda: R(1).random((2, 1.5)), TypeError, "size must be None, an int or a tuple of ints"),
        (lambda: R(1).random(3, out=np.empty(4)), fusemath.ShapeError, "out has shape (4,), expected (3,)"),
        (lambda: R(1).random(out=np.empty(4, np.float32)), fusemath.DtypeError,
         "out has dtype float32, expected float64"),
        (lambda: R(1).random(dtype=np.int32), fusemath.DtypeError,
         "dtype int32 (out's), expected float32 or float64 for uniform"),
        (lambda: R(1).standard_normal(dtype=np.float16), TypeError, "expected float32 or float64"),
        (lambda: R(1).uniform(2, 1), fusemath.InvalidArgumentError,
         "uniform: uniform low = 2, high = 1; expected finite low < high"),
        (lambda: R(1).uniform(0, np.inf), ValueError, "expected finite low < high"),
        (lambda: R(1).uniform(np.nan, 1), ValueError, "low = nan"),
        (lambda: R(1).uniform(-1e308, 1e308, 4), ValueError, "expected high - low finite"),  # NumPy: OverflowError
        (lambda: R(1).uniform(0, 1e39, 4, dtype=np.float32), ValueError, "within float32's range"),
        (lambda: R(1).normal(0, 1e39, 4, dtype=np.float32), ValueError, "stddev = 1e+39 for a float32 out"),
        (lambda: R(1).exponential(1e39, 4, dtype=np.float32), ValueError, "scale = 1e+39 for a float32 out"),
        (lambda: R(1).normal(0, -1), fusemath.InvalidArgumentError,
         "normal stddev (scale) = -1, expected a finite value >= 0"),
        (lambda: R(1).normal(np.inf), ValueError, "normal mean (loc) = inf"),
        (lambda: R(1).lognormal(0, -0.5), ValueError, "lognormal stddev (sigma) = -0.5"),
        (lambda: R(1).exponential(-2), ValueError, "exponential scale = -2, expected a finite value >= 0"),
        (lambda: R(1).normal([0, 1]), TypeError, "loc must be a real number (array parameters"),
        (lambda: R(1).standard_exponential(method="ziggurat"), ValueError, "method = 'ziggurat'"),
        (lambda: R(1, mode="curand").exponential(), fusemath.NotSupportedError,
         "mode curand has no exponential"),
        (lambda: R(1).advance(-1), ValueError, "advance: n = -1, expected 0 <= n"),
        (lambda: R(1).advance(2.0), TypeError, "n must be an int, not float"),
        (lambda: R(1).advance(2**63), ValueError, "a position below 2**63"),
        (lambda: R(1).spawn(-1), ValueError, "n_children = -1, expected >= 0"),
        (lambda: setattr(R(1), "state", {"seed": 1}), TypeError, "a dict with 'seed' and 'position'"),
        (lambda: setattr(R(1), "state", {"seed": 1, "position": -5}), ValueError, "position = -5"),
        # a curand float64 run in a portable state: every later draw failed with the C layer's args message
        (lambda: setattr(R(1), "state", {"seed": 1, "position": 5, "mode": "portable", "f64_run": (0, 5)}),
         ValueError, "f64_run = (0, 5) with mode 'portable', expected (0, 0)"),
        (lambda: setattr(R(1), "state", {"seed": 1, "position": 5, "f64_run": 3}), TypeError,
         "f64_run must be a pair (a, b) of ints, not int"),
        (lambda: setattr(R(1, mode="curand"), "state", {"seed": 1, "position": 5, "f64_run": (0.5, 2)}),
         ValueError, "expected (a, b) ints with 0 <= a <= b <= position"),
        (lambda: R(1).binomial(3, 0.5), NotImplementedError, "Generator.binomial is not implemented"),
        (lambda: R(1).choice(10), NotImplementedError, "Generator.choice is not implemented"),
    ],
)
def test_bad_arguments(call, exc, text):
    with pytest.raises(exc) as e:
        call()
    assert text in str(e.value)


def test_out_read_only_strided_and_nothing_moves():
    g = fr.default_rng(1)
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(ValueError) as e:
        g.random(out=ro)
    assert "out" in str(e.value) and "read-only" in str(e.value).lower()
    strided = np.zeros((4, 4))[:, ::2]
    with pytest.raises(fusemath.InvalidArgumentError, match="out has stride 2 on axis 1, expected 1"):
        g.random(out=strided)
    assert not strided.any() and g.state["position"] == 0  # nothing written, the position unmoved


def test_curand_second_f64_run_refused():
    g = fr.default_rng(1, mode="curand")
    g.random(8)  # float64: a run [0, 8)
    g.random(8, dtype=np.float32)  # 32-bit calls after it
    with pytest.raises(fusemath.NotSupportedError, match="one run of float64 calls"):
        g.random(4)
    g.state = {"seed": 1, "position": g.state["position"]}  # a new offset: a new run may start
    assert g.random(4).shape == (4,)


def test_describe_tells_the_last_draws_plan():
    g = fr.default_rng(3)
    with pytest.raises(fusemath.InvalidStateError, match="nothing drawn yet"):
        g.describe()
    g.standard_normal(1000, dtype=np.float32)
    d = g.describe()
    assert d.startswith("rng cpu/") and "normal f32" in d and "n=1000" in d and "portable" in d, d
    g.uniform(2.0, 3.0, size=(10, 20))
    d = g.describe()
    assert "uniform f64" in d and "n=200" in d, d
    g.integers(0, 10, size=5)
    assert "integers i64" in g.describe()
    pos = g.state["position"]
    g.describe()
    assert g.state["position"] == pos  # describing draws nothing
    b = fr.default_rng(3, device="best")
    b.random(1 << 16)
    assert "best=" in b.describe() and "predicted" in b.describe(), b.describe()
    h = pickle.loads(pickle.dumps(g))  # a fresh process's generator: nothing drawn there yet
    with pytest.raises(fusemath.InvalidStateError, match="nothing drawn yet"):
        h.describe()


def test_used_after_free():
    g = fr.default_rng(1)
    with g:
        g.random()
    for call in (g.random, lambda: g.advance(1), lambda: g.state, lambda: g.spawn(1), g.describe):
        with pytest.raises(fusemath.InvalidStateError, match="the generator was freed"):
            call()


@pytest.mark.skipif(fusemath.cuda_device_count() > 0, reason="a GPU is present: test_random_gpu.py tests it")
def test_cuda_generator_without_a_gpu():
    g = fr.default_rng(1, device="cuda")
    assert g.device == "cuda:0"
    with pytest.raises(fusemath.UnavailableError):
        g.random(3)
    assert g.state["position"] == 0
