"""Bad inputs: each raises the documented exception type with a message naming the argument."""
import re

import numpy as np
import pytest

import fusemath


def f32(*shape):
    return np.ones(shape, np.float32)


def raises(exc, *fragments):
    """pytest.raises that also checks every fragment appears (case-insensitive) in the message."""
    pattern = "".join(f"(?=.*{re.escape(f)})" for f in fragments)
    return pytest.raises(exc, match=re.compile(pattern, re.IGNORECASE | re.DOTALL))


def test_exception_hierarchy():
    expected = {
        "InvalidArgumentError": (ValueError, "FM_ERR_INVALID_ARGUMENT"),
        "ShapeError": (ValueError, "FM_ERR_SHAPE"),
        "DtypeError": (TypeError, "FM_ERR_DTYPE"),
        "DeviceError": (ValueError, "FM_ERR_DEVICE"),
        "NotSupportedError": (TypeError, "FM_ERR_NOT_SUPPORTED"),
        "OutOfMemoryError": (MemoryError, "FM_ERR_OUT_OF_MEMORY"),
        "AliasError": (ValueError, "FM_ERR_ALIAS"),
        "TooLargeError": (ValueError, "FM_ERR_TOO_LARGE"),
        "LinAlgError": (ValueError, "FM_ERR_LINALG"),
        "InvalidStateError": (RuntimeError, "FM_ERR_FREED"),
        "UnavailableError": (RuntimeError, "FM_ERR_UNAVAILABLE"),
        "BackendError": (RuntimeError, "FM_ERR_BACKEND"),
        "InternalError": (RuntimeError, "FM_ERR_INTERNAL"),
        "NotApplicableError": (TypeError, "FM_ERR_NOT_APPLICABLE"),
    }
    assert issubclass(fusemath.FusemathError, Exception)
    assert fusemath.FusemathError.status is None
    for name, (builtin, status) in expected.items():
        cls = getattr(fusemath, name)
        assert issubclass(cls, fusemath.FusemathError), name
        assert issubclass(cls, builtin), name
        assert cls.status == status
        assert cls("x").status == status
        assert cls.__module__ == "fusemath"


def test_shape_mismatch():
    with raises(fusemath.ShapeError, "a has shape (3, 4)", "b has shape (5, 6)"):
        fusemath.matmul(f32(3, 4), f32(5, 6))
    with raises(ValueError, "batch", "a", "b"):
        fusemath.matmul(f32(2, 3, 4), f32(3, 4, 5))
    with raises(ValueError, "b", "(4,)"):
        fusemath.matmul(f32(3, 5), f32(4))


def test_dtypes_without_a_product():
    # (mixed dtypes promote as NumPy's: test_matmul_numpy.py; integers and bool compute exactly)
    with raises(TypeError, "a "):
        fusemath.matmul(np.array([["x"]]), f32(1, 1))


def test_float16_on_cpu_aux_not_supported():
    """float16 on the cpu is computed (test_matmul_numpy.py); what it lacks is a clear error."""
    a = np.ones((3, 4), np.float16)
    with raises(TypeError, "float16", "cpu"):
        fusemath.matmul(a, np.ones((4, 5), np.float16), epilogue="gelu+aux")
    with pytest.raises(fusemath.NotSupportedError):
        fusemath.matmul(a, np.ones((4, 5), np.float16), epilogue="gelu+aux", execution="cpu")


def test_bias_wrong_length_and_dtype():
    with raises(ValueError, "bias has length 4", "N = 5"):
        fusemath.matmul(f32(3, 4), f32(4, 5), bias=f32(4))
    with raises(fusemath.ShapeError, "bias"):
        fusemath.matmul(f32(3, 4), f32(4, 5), bias=np.float32(1.0))
    with raises(TypeError, "relu_aux has dtype float32", "uint8"):
        fusemath.matmul(f32(3, 4), f32(4, 5), epilogue="drelu", epilog_inputs={"relu_aux": f32(3, 1)})
    with raises(ValueError, "bias"):  # batch dims of bias that do not broadcast
        fusemath.matmul(f32(2, 3, 4), f32(4, 5), bias=f32(3, 5))


def test_unknown_epilogue_name():
    with raises(fusemath.InvalidArgumentError, "swish"):
        fusemath.matmul(f32(3, 4), f32(4, 5), epilogue="swish")
    with raises(ValueError, "two activations"):
        fusemath.matmul(f32(3, 4), f32(4, 5), epilogue="relu+gelu")
    with raises(ValueError, "aux"):
        fusemath.matmul(f32(3, 4), f32(4, 5), epilogue="aux")
    with raises(ValueError, "unknown bits"):
        fusemath.matmul(f32(3, 4), f32(4, 5), epilogue=1 << 20)
    with raises(TypeError, "epilogue"):
        fusemath.matmul(f32(3, 4), f32(4, 5), epilogue=1.5)


@pytest.mark.parametrize("epilogue", ["bias", "bias+relu", "RELU_AUX_BIAS", fusemath.Epilogue.GELU_BIAS])
def test_bias_epilogue_without_bias(epilogue):
    with raises(ValueError, "bias", "not given"):
        fusemath.matmul(f32(3, 4), f32(4, 5), epilogue=epilogue)


def test_out_aliasing_an_output():
    # (out aliasing an input computes through a temporary as NumPy: test_matmul_numpy.py); an out
    # overlapping itself stays refused where the library writes it (an out of another dtype is
    # written by np.copyto, as NumPy writes it)
    x = np.ones((4, 4), np.float32)
    with raises(fusemath.AliasError, "out", "overlaps itself"):
        fusemath.matmul(x, x, out=np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), (4, 4), (0, 4)))


def test_out_wrong_shape_dtype_readonly():
    with raises(fusemath.ShapeError, "out has shape (3, 4)", "(3, 5)"):
        fusemath.matmul(f32(3, 4), f32(4, 5), out=f32(3, 4))
    with raises(fusemath.DtypeError, "Cannot cast ufunc 'matmul' output", "dtype('int32')"):
        fusemath.matmul(f32(3, 4), f32(4, 5), out=np.ones((3, 5), np.int32))
    ro = f32(3, 5)
    ro.flags.writeable = False
    # the one-C-call path (2-D NumPy operands) and the general one (options=) say the same
    for kw in ({}, {"options": fusemath.MatmulOptions()}):
        with raises(fusemath.InvalidArgumentError, "out is read-only"):
            fusemath.matmul(f32(3, 4), f32(4, 5), out=ro, **kw)
        with raises(fusemath.InvalidArgumentError, "out is read-only"):
            fusemath.matmul(f32(3, 4), f32(4, 5), out=np.broadcast_to(f32(1, 5), (3, 5)), **kw)


@pytest.mark.parametrize("bad", ["abc", None, {"a": 1}, object()])  # (lists and numbers: as NumPy)
def test_non_array_arguments(bad):
    with raises(TypeError, "a "):
        fusemath.matmul(bad, f32(2, 2))
    with raises(TypeError, "b "):
        fusemath.matmul(f32(2, 2), bad)
    if bad is not None:
        with raises(TypeError, "bias"):
            fusemath.matmul(f32(2, 2), f32(2, 2), bias=bad)
        with raises(TypeError, "c "):
            fusemath.matmul(f32(2, 2), f32(2, 2), bad)


def test_zero_d_arrays():
    with raises(ValueError, "a is 0-d"):
        fusemath.matmul(np.float32(2.0), f32(2, 2))
    with raises(ValueError, "b is 0-d"):
        fusemath.matmul(f32(2, 2), np.array(3.0, np.float32))


def test_c_shape_and_beta():
    with raises(ValueError, "c has shape (4, 5)", "(3, 5)"):
        fusemath.matmul(f32(3, 4), f32(4, 5), f32(4, 5))
    with raises(ValueError, "c has shape (2, 3, 5)"):
        fusemath.matmul(f32(3, 4), f32(4, 5), f32(2, 3, 5))
    with raises(ValueError, "beta", "c is None"):
        fusemath.matmul(f32(3, 4), f32(4, 5), beta=2.0)


def test_complex_alpha_on_real_dtype():
    with raises(ValueError, "imaginary"):
        fusemath.matmul(f32(3, 4), f32(4, 5), alpha=1 + 1j)
    with raises(ValueError, "beta", "imaginary", "float32"):
        fusemath.matmul(f32(3, 4), f32(4, 5), f32(3, 5), beta=np.complex128(1j))
    with raises(ValueError, "alpha", "imaginary"):
        fusemath.Matmul(f32(3, 4), f32(4, 5), alpha=2j)
    with raises(TypeError, "alpha"):
        fusemath.matmul(f32(3, 4), f32(4, 5), alpha="2")
    with raises(TypeError, "alpha"):
        fusemath.matmul(f32(3, 4), f32(4, 5), alpha=[2.0])
    # None means the default alpha = 1
    np.testing.assert_array_equal(fusemath.matmul(f32(3, 4), f32(4, 5), alpha=None), np.full((3, 5), 4.0))


def test_activation_on_complex_not_supported():
    z = np.ones((3, 3), np.complex64)
    with raises(TypeError, "relu", "complex"):
        fusemath.matmul(z, z, epilogue="relu")


def test_options_and_execution_errors():
    with raises(TypeError, "unknown option", "nthreads"):
        fusemath.matmul(f32(2, 2), f32(2, 2), options={"nthreads": 2})
    with raises(TypeError, "options"):
        fusemath.matmul(f32(2, 2), f32(2, 2), options=3)
    with raises(ValueError, "execution", "tpu"):
        fusemath.matmul(f32(2, 2), f32(2, 2), execution="tpu")
    with raises(ValueError, "num_threads"):
        fusemath.matmul(f32(2, 2), f32(2, 2), options={"num_threads": -1})
    with raises(TypeError, "stream"):
        fusemath.matmul(f32(2, 2), f32(2, 2), stream="s")
    with raises(TypeError, "set_num_threads"):
        fusemath.set_num_threads("2")


def test_cuda_execution_without_gpu():
    if fusemath.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present")
    with raises(RuntimeError, "cuda"):
        fusemath.matmul(f32(2, 2), f32(2, 2), execution="cuda")
    with pytest.raises(fusemath.UnavailableError):
        fusemath.matmul(f32(2, 2), f32(2, 2), execution="cuda:1")


def test_unaligned_operand():
    raw = np.zeros(64, np.uint8)
    a = np.frombuffer(raw, dtype=np.float32, offset=1, count=12).reshape(3, 4)
    assert not a.flags.aligned
    b = f32(4, 2)
    np.testing.assert_allclose(fusemath.matmul(a, b), a @ b, rtol=1e-6)  # from an aligned copy
    out = np.frombuffer(bytearray(64), dtype=np.float32, offset=1, count=6).reshape(3, 2)
    with raises(ValueError, "d ", "aligned"):  # an output cannot be a copy
        fusemath.matmul(a, b, out=out)


def test_unusable_gpu_array_rejected_clearly():
    # A GPU array of no known library is viewed through CuPy or PyTorch (results are allocated
    # with them): without either it is a DeviceError, with them this fake cannot be viewed
    # (TypeError); both name the argument.
    class FakeCuda:
        def __dlpack__(self, *args, **kwargs):
            raise AssertionError("not a real DLPack producer")

        def __dlpack_device__(self):
            return (2, 0)

    with raises((fusemath.DeviceError, TypeError), "a ", "GPU"):
        fusemath.matmul(FakeCuda(), f32(2, 2))
    # as a third operand of host a and b it is a DeviceError naming it
    with raises(fusemath.DeviceError, "bias", "host"):
        fusemath.matmul(f32(2, 2), f32(2, 2), bias=FakeCuda())


def test_errors_do_not_leak_into_later_calls():
    with pytest.raises(ValueError):
        fusemath.matmul(f32(3, 4), f32(5, 6))
    d = fusemath.matmul(f32(3, 4), f32(4, 5))
    np.testing.assert_array_equal(d, np.full((3, 5), 4.0, np.float32))


def test_thread_counts_are_bounded(rng):
    """A plan never starts more than four threads per core (at least 16 allowed): asking
    for thousands used to start them all (and libgomp exits the process when it cannot)."""
    import os

    a = rng.standard_normal((256, 256)).astype(np.float32)
    with pytest.raises(ValueError, match=r"num_threads.*4096"):
        fusemath.matmul(a, a, options={"num_threads": 100000})
    cap = max(4 * os.cpu_count(), 16)
    old = fusemath.get_num_threads()
    try:
        fusemath.set_num_threads(4096)
        assert fusemath.get_num_threads() == 4096
        tall = rng.standard_normal((8192, 32)).astype(np.float32)  # many panels: more than the cap
        wide = rng.standard_normal((32, 64)).astype(np.float32)
        mm = fusemath.Matmul(tall, wide)
        mm.plan()
        threads = int(mm.describe().split("threads=")[1].split()[0])
        assert 1 <= threads <= cap, mm.describe()
        np.testing.assert_allclose(mm.execute(), tall.astype(np.float64) @ wide, rtol=1e-4, atol=1e-3)
        with pytest.raises(ValueError, match="4096"):
            fusemath.set_num_threads(4097)
    finally:
        fusemath.set_num_threads(old)


def test_scalars_beyond_float64_and_array_beta():
    a = np.ones((4, 4))
    with pytest.raises(ValueError, match="alpha is too large for a float64"):
        fusemath.matmul(a, a, alpha=10**400)
    with pytest.raises(ValueError, match="beta is too large for a float64"):
        fusemath.matmul(a, a, c=a, beta=10**400)
    with pytest.raises(ValueError, match="clamp has a bound too large"):
        fusemath.matmul(a, a, epilogue="clamp", clamp=(0, 10**400))
    with pytest.raises(ValueError, match="alpha is too large"):
        fusemath.Matmul(a, a, alpha=10**400).plan()
    with pytest.raises(ValueError, match="beta = array.* was given but c is None"):
        fusemath.matmul(a, a, beta=np.array([1.0, 2.0]))
    np.testing.assert_array_equal(fusemath.matmul(a, a, beta=np.float32(0)), a @ a)


def test_misaligned_operands_are_copied_and_outputs_refused_with_advice():
    """A float64 view at an odd byte address (legal in NumPy): as an input it is computed
    from an aligned copy, as NumPy does; as out= (which must be written in place) it is a
    clear error that says what to do."""
    raw = np.zeros(8 * 64 + 8, np.uint8)
    a = raw[1:1 + 8 * 64].view(np.float64).reshape(8, 8)
    assert not a.flags.aligned
    a[...] = np.arange(64.0).reshape(8, 8)
    b = np.eye(8)
    np.testing.assert_array_equal(fusemath.matmul(a, b), a @ b)
    mm = fusemath.Matmul(a, b)
    np.testing.assert_array_equal(mm.plan().execute(), a @ b)
    for kw in ({}, {"options": fusemath.MatmulOptions()}):  # the one-C-call path and the general one
        with pytest.raises(fusemath.InvalidArgumentError, match=r"out at 0x[0-9a-f]+ is not aligned to 8 bytes"):
            fusemath.matmul(b, b, out=a, **kw)
    import fusemath.fft as ff

    z = raw[1:1 + 8 * 64].view(np.complex128).reshape(4, 8)
    z[...] = np.arange(32).reshape(4, 8) + 1j
    np.testing.assert_allclose(ff.fft(z), np.fft.fft(z), rtol=1e-12, atol=1e-12)  # ascontiguousarray keeps it as is


@pytest.mark.parametrize("which", ["a", "b", "bias"])
def test_byte_strides_off_the_item_size_are_copied(which):
    """A view whose byte stride is no multiple of the item size (legal in NumPy) takes the
    same aligned copy in the stateless fast path as in the general one (found by fuzzing: the
    fast path raised the array conversion's ValueError instead)."""
    raw = np.zeros(400, np.uint8)
    odd = np.ndarray((4, 5), np.float32, raw.data, offset=1, strides=(21, 4))
    odd[...] = np.arange(20, dtype=np.float32).reshape(4, 5)
    a, b, bias = f32(3, 4), f32(4, 5), f32(5)
    if which == "a":
        a = np.ndarray((3, 4), np.float32, raw.data, offset=1, strides=(17, 4))
        a[...] = np.arange(12, dtype=np.float32).reshape(3, 4)
    elif which == "b":
        b = odd
    else:
        bias = np.ndarray((5,), np.float32, raw.data, offset=3, strides=(5,))
        bias[...] = np.arange(5, dtype=np.float32)
    assert not (a.flags.aligned and b.flags.aligned and bias.flags.aligned)
    want = np.maximum(a.astype(np.float64) @ b + bias, 0)
    for kw in ({}, {"options": {}}):  # the one-C-call path and the general one
        got = fusemath.matmul(a, b, bias=bias, epilogue="relu", **kw)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_argument_wording_found_by_fuzzing(tmp_path):
    a = np.ones((4, 4))
    with pytest.raises(ValueError, match="iterations = 1099511627776, expected 1 to 1000"):
        fusemath.Matmul(a, a).plan().autotune(iterations=2**40)
    with pytest.raises(ValueError, match=r"Matmul.autotune: iterations = 1001, expected 1 to 1000$"):
        fusemath.Matmul(a, a).plan().autotune(iterations=1001)  # C's own limit, said in Python's terms
    old = fusemath.get_num_threads()
    try:
        fusemath.set_num_threads(np.int64(2))  # NumPy integers, as elsewhere
        assert fusemath.get_num_threads() == 2
    finally:
        fusemath.set_num_threads(old)
    with pytest.raises(TypeError, match="wisdom.load: path must be"):
        fusemath.wisdom.load(None)
    with pytest.raises(ValueError, match="NUL character"):
        fusemath.wisdom.save(str(tmp_path / "a\0b"))


def test_big_endian_inputs_and_outputs_compute():
    a = np.arange(16, dtype=">f8").reshape(4, 4)
    b = np.ones((4, 4))
    np.testing.assert_array_equal(fusemath.matmul(a, b), a.astype(np.float64) @ b)
    np.testing.assert_array_equal(fusemath.matmul(b, a), b @ a.astype(np.float64))
    out = np.zeros((4, 4), ">f8")  # NumPy writes a big-endian out too: through a temporary
    assert fusemath.matmul(a, b, out=out) is out
    np.testing.assert_array_equal(out, np.matmul(a, b))


def test_broken_protocol_objects_are_named():
    """Objects whose DLPack or stream protocol methods return the wrong thing get a TypeError
    naming the argument and the method, not an unpacking error from inside the library."""

    class BadDevice:
        def __dlpack__(self, **kw):
            return np.ones((2, 2)).__dlpack__()

        def __dlpack_device__(self):
            return None

    class BadStream:
        def __cuda_stream__(self):
            return 5

    with raises(TypeError, "a.__dlpack_device__() did not return (device_type, device_id)"):
        fusemath.matmul(BadDevice(), f32(2, 2).astype(np.float64))
    with raises(TypeError, "stream.__cuda_stream__() returned 5, expected (version, handle)"):
        fusemath.matmul(f32(2, 2), f32(2, 2), stream=BadStream())


def test_out_overlapping_itself():
    o = np.lib.stride_tricks.as_strided(np.zeros(3), shape=(2, 3), strides=(0, 8))
    with raises(fusemath.AliasError, "out overlaps itself", "stride 0"):
        fusemath.matmul(np.ones((2, 2)), np.ones((2, 3)), out=o)


def test_thread_and_count_arguments_are_consistent():
    """NumPy integers are ints everywhere, bools nowhere, and a thread count past the limit is
    the library's InvalidArgumentError whatever its size."""
    import fusemath.fft as ff

    mm = fusemath.Matmul(f32(4, 4), f32(4, 4))
    mm.plan()
    mm.autotune(iterations=np.int64(1))
    with raises(TypeError, "num_threads", "bool"):
        fusemath.matmul(f32(2, 2), f32(2, 2), options={"num_threads": True})
    for n in (4097, 2**31, 2**70):
        with raises(fusemath.InvalidArgumentError, "set_num_threads", "4096"):
            fusemath.set_num_threads(n)
    before = fusemath.get_num_threads()
    fusemath.set_num_threads(np.int32(2))
    assert fusemath.get_num_threads() == 2
    fusemath.set_num_threads(0)
    assert fusemath.get_num_threads() >= 1
    fusemath.set_num_threads(before)
    f = ff.FFT(np.ones(4, complex))
    f.free()
    with pytest.raises(fusemath.InvalidStateError):
        with f:
            pass


def test_bad_num_threads_environment_is_an_error():
    import subprocess
    import sys

    env = dict(__import__("os").environ, FUSEMATH_NUM_THREADS="3x")
    r = subprocess.run([sys.executable, "-c", "import fusemath"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "FUSEMATH_NUM_THREADS = '3x'" in r.stderr
    env["FUSEMATH_NUM_THREADS"] = "3"
    r = subprocess.run([sys.executable, "-c", "import fusemath; print(fusemath.get_num_threads())"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "3"


def test_unknown_backend_environment_is_an_error():
    """FUSEMATH_BACKEND naming no backend of this build fails where it is read (the first use of
    the library), naming the value and the backends that exist, instead of failing every plan."""
    import subprocess
    import sys

    env = dict(__import__("os").environ, FUSEMATH_BACKEND="nonexistent")
    code = "import numpy as np, fusemath; fusemath.matmul(np.ones((2, 2)), np.ones((2, 2)))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "FUSEMATH_BACKEND = 'nonexistent'" in r.stderr and "openblas" in r.stderr
    env["FUSEMATH_BACKEND"] = "openblas"
    r = subprocess.run([sys.executable, "-c", code + "; print('ok')"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_alpha_beta_are_refused(bad):
    """One policy with the FFT's scale: a non-finite alpha or beta is refused, naming it."""
    a = np.ones((3, 4), np.float32)
    b = np.ones((4, 2), np.float32)
    c = np.ones((3, 2), np.float32)
    with pytest.raises(ValueError, match="alpha.*finite"):
        fusemath.matmul(a, b, alpha=bad)
    with pytest.raises(ValueError, match="beta.*finite"):
        fusemath.matmul(a, b, c, beta=bad)
    with pytest.raises(ValueError, match="alpha.*finite"):
        fusemath.Matmul(a, b, alpha=bad).plan()


def test_result_past_int64_is_fusemaths_error():
    """Zero-stride inputs describe huge products cheaply: a result no 64-bit count holds is
    fusemath's TooLargeError naming the shapes, not "do not broadcast" or NumPy's "array is too big"."""
    one = np.float32(1)
    a = np.broadcast_to(one, (2**40, 1, 1, 1))
    b = np.broadcast_to(one, (2**30, 1, 1))
    with pytest.raises(fusemath.TooLargeError, match=r"\(1099511627776, 1, 1, 1\).*64-bit"):
        fusemath.matmul(a, b)
    with pytest.raises(fusemath.TooLargeError, match="matmul"):
        fusemath.matmul(np.broadcast_to(one, (2**40, 1)), np.broadcast_to(one, (1, 2**40)))


@pytest.mark.parametrize("bits", [-1, 2**32])
def test_epilogue_int_out_of_range_is_invalid_argument(bits):
    a = np.ones((2, 3), np.float32)
    with pytest.raises(fusemath.InvalidArgumentError, match="epilogue"):
        fusemath.matmul(a, a.T, epilogue=bits)
