"""fusemath.random's integers and poisson: NumPy's names, keywords and scalar types, exactness past
2^53, positions near 2^40 and 2^62 against an independent Philox, and every bad argument's exception
(the C layer's checks, reached through the thin Python front), with nothing moved on an error.
Statistics are test_random_stats.py's."""
import numpy as np
import pytest

import fusemath
import fusemath.random as fr
from test_random_stats import philox

R = fr.Generator


def lemire_ref(seed, pos, n, r):
    """integers(0, r) for a power-of-two r <= 2^32 (no rejection): the high word of w r."""
    m = np.arange(pos, pos + n, dtype=np.uint64)
    b = m // np.uint64(4)
    w = philox(b, b >> np.uint64(32), 0, 0, seed)[np.arange(n), (m % np.uint64(4)).astype(np.int64)]
    return ((w * np.uint64(r)) >> np.uint64(32)).astype(np.int64)


@pytest.mark.parametrize("pos", [0, 3, 2**40 + 1, 2**62 - 2, 2**62 + 5])
def test_integers_at_large_positions(pos):
    g = R(0xABCDEF).advance(pos)
    np.testing.assert_array_equal(g.integers(0, 1 << 20, 1001), lemire_ref(0xABCDEF, pos, 1001, 1 << 20))
    assert g.state["position"] == pos + 1001


def test_numpy_semantics():
    g = R(1)
    assert type(g.integers(10)) is np.int64 and 0 <= g.integers(10) < 10  # size None: NumPy's scalar
    assert type(g.integers(10, dtype=np.int32)) is np.int32
    assert type(g.integers(-1, 1, dtype=np.int8)) is np.int8
    assert type(g.poisson(3.0)) is int  # as NumPy's poisson
    assert g.integers(5, size=(2, 3)).shape == (2, 3)
    assert g.integers(3, 4, 100).tolist() == [3] * 100  # a one-value range
    assert set(g.integers(3, 4, 100, endpoint=True).tolist()) == {3, 4}
    big = g.integers(2**62, 2**62 + 3, 1000)  # exact beyond 2^53
    assert set(big.tolist()) == {2**62, 2**62 + 1, 2**62 + 2}
    top = g.integers(2**63 - 2, 2**63, 1000)  # NumPy's exclusive 2**63 for int64
    assert set(top.tolist()) == {2**63 - 2, 2**63 - 1}
    assert g.poisson(lam=2.0, size=7).dtype == np.int64
    assert g.integers(low=2, high=9, size=4, dtype=np.uint16, endpoint=False).dtype == np.uint16
    # each call advances the position by its count, and after an error nothing moved
    pos = g.state["position"]
    g.integers(0, 7, 11)
    g.poisson(1e6, 13)
    assert g.state["position"] == pos + 24


def test_same_range_same_values_any_dtype():
    a = R(9).integers(-5, 100, 999, dtype=np.int8)
    b = R(9).integers(-5, 100, 999, dtype=np.int64)
    np.testing.assert_array_equal(a, b)


def test_curand_poisson_is_uint32_curand_values_as_int64():
    g = R(3, mode="curand")
    x = g.poisson(12.5, 1000)
    assert x.dtype == np.int64 and x.min() >= 0 and g.state["position"] == 1000


@pytest.mark.parametrize(
    "call, exc, text",
    [
        (lambda: R(1).integers(5, 5), fusemath.InvalidArgumentError,
         "integers low = 5, high = 5; expected low < high"),
        (lambda: R(1).integers(5, 4, endpoint=True), ValueError, "expected low <= high"),
        (lambda: R(1).integers(0), ValueError, "integers low = 0, high = 0"),
        (lambda: R(1).integers(0, np.inf), TypeError, "integers: high must be an int, not float"),
        (lambda: R(1).integers(np.nan, 3), TypeError, "integers: low must be an int, not float"),
        (lambda: R(1).integers(0, 2**64), ValueError, "high is out of range"),
        (lambda: R(1).integers(0, 300, dtype=np.uint8), ValueError,
         "integers low = 0, high = 300 are out of bounds for uint8, expected 0 <= low <= high - 1 <= 255"),
        (lambda: R(1).integers(-1, 3, dtype=np.uint32), ValueError, "out of bounds for uint32"),
        (lambda: R(1).integers(10, dtype=np.float64), fusemath.DtypeError,
         "dtype float64 (out's), expected int8, int16, int32, int64, uint8, uint16 or uint32 for integers"),
        (lambda: R(1).integers(10, dtype=np.uint64), TypeError, "dtype uint64 (out's)"),
        (lambda: R(1).normal(size=3, dtype=np.int64), TypeError, "expected float32 or float64 for normal"),
        (lambda: R(1).integers(10, size=-1), ValueError, "integers: size = -1 has a negative entry"),
        (lambda: R(1).integers(10, size=(2, 0.5)), TypeError, "size must be None, an int or a tuple of ints"),
        (lambda: R(1).poisson(2, size=(3, -2)), ValueError, "poisson: size = (3, -2) has a negative entry"),
        (lambda: R(1).integers([1, 2]), NotImplementedError, "array-valued high is not implemented"),
        (lambda: R(1).integers(np.zeros(2), 5), NotImplementedError, "array-valued low"),
        (lambda: R(1, mode="curand").integers(10), fusemath.NotSupportedError,
         "mode curand has no integers (cuRAND generates none), expected mode portable"),
        (lambda: R(1).poisson(-1), fusemath.InvalidArgumentError,
         "poisson lam = -1, expected a finite value with 0 <= lam <= 9.223372006484771e+18"),
        (lambda: R(1).poisson(np.nan), ValueError, "poisson lam = nan"),
        (lambda: R(1).poisson(1e19), ValueError, "lam too large"),
        (lambda: R(1).poisson(np.inf), ValueError, "lam too large"),
        (lambda: R(1, mode="curand").poisson(0.0), ValueError,
         "poisson lam = 0, expected 0 < lam <= 400000 in mode curand"),
        (lambda: R(1, mode="curand").poisson(400001), ValueError, "expected 0 < lam <= 400000"),
        (lambda: R(1).poisson([1.0, 2.0]), NotImplementedError, "array-valued lam is not implemented"),
        (lambda: R(1).poisson("3"), TypeError, "lam must be a real number"),
    ],
)
def test_bad_arguments(call, exc, text):
    with pytest.raises(exc) as e:
        call()
    assert text in str(e.value)


def test_errors_move_nothing_and_free():
    g = R(1)
    g.integers(10, size=5)
    for bad in (lambda: g.integers(5, 5, 3), lambda: g.poisson(-1.0, 3), lambda: g.integers(10, dtype=np.float32)):
        with pytest.raises((ValueError, TypeError)):
            bad()
    assert g.state["position"] == 5
    with g:  # the context manager frees it
        g.poisson(1.0, 2)
    for call in (lambda: g.integers(3), lambda: g.poisson(1.0), lambda: g.advance(1)):
        with pytest.raises(fusemath.InvalidStateError, match="the generator was freed"):
            call()
    h = R(2)
    h.free()
    with pytest.raises(fusemath.InvalidStateError, match="Generator.integers: the generator was freed"):
        h.integers(3)
