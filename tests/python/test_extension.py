"""The extension module fusemath._fusemath: array conversion (buffer protocol, DLPack),
reference counting, module-level functions, per-module state."""
import ctypes
import importlib.util
import sys

import numpy as np
import pytest

import fusemath
from mmref import call_matmul

C = fusemath._fusemath


# ---------------------------------------------------------------------------
# Buffer protocol
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype,name",
    [(np.float16, "f16"), (np.float32, "f32"), (np.float64, "f64"), (np.complex64, "c64"),
     (np.complex128, "c128"), (np.int8, "i8"), (np.uint8, "u8"), (np.int32, "i32"), (np.int64, "i64"),
     (np.uint32, "u32")],
)
def test_buffer_dtypes(dtype, name):
    x = np.zeros((2, 3), dtype)
    addr, device, dtname, shape, strides = C.tensor_info(x)
    assert (addr, device, dtname, shape, strides) == (x.ctypes.data, (1, 0), name, (2, 3), (3, 1))


def test_buffer_strides_in_elements():
    base = np.zeros((6, 8), np.complex64)
    for view in (base.T, base[::2, ::3], base[::-1], base[:, ::-2], np.asfortranarray(base),
                 np.broadcast_to(base[:1], (5, 8))):
        addr, _, _, shape, strides = C.tensor_info(view)
        assert addr == view.__array_interface__["data"][0]
        assert shape == view.shape
        assert strides == tuple(s // view.itemsize for s in view.strides)


def matmul_specs(a, b):
    """The output specs of a @ b (the one C entry point, CALL_SPECS)."""
    return C.call(C.OP_MATMUL, C.CALL_SPECS, 0, (a, b) + (None,) * 8, (1.0, 0.0) + (0,) * 7 + (None, None, 0, 0))


def test_buffer_rejections():
    odd = np.lib.stride_tricks.as_strided(np.zeros(32, np.float32), (3, 3), (6, 4))
    with pytest.raises(ValueError, match="argument 'a': byte stride 6 .* not a multiple of the item size 4"):
        matmul_specs(odd, np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match="argument 'obj'.*'>d'"):
        C.tensor_info(np.ones(3).astype(">f8"))
    with pytest.raises(TypeError, match="argument 'obj'.*'2s'"):
        C.tensor_info(np.ones(3, "S2"))
    with pytest.raises(ValueError, match="9 dimensions"):
        C.tensor_info(np.zeros((1,) * 9))
    ro = np.ones(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        C.tensor_info(ro, True)
    with pytest.raises(TypeError, match="must be an array"):
        C.tensor_info([1.0, 2.0])
    with pytest.raises(TypeError, match="not None"):
        C.tensor_info(None)
    assert C.tensor_info(memoryview(b"abcd"))[2:] == ("u8", (4,), (1,))


def test_data_ptr():
    x = np.arange(12.0).reshape(3, 4)
    assert C.data_ptr(x) == x.ctypes.data
    assert C.data_ptr(x[1:, ::-1]) == x[1:, ::-1].__array_interface__["data"][0]
    with pytest.raises(TypeError):
        C.data_ptr(3)
    with pytest.raises(TypeError):
        C.data_ptr(None)


def test_low_level_argument_errors():
    """Options of the one entry point, call(), are checked and named."""
    a = np.ones((3, 4), np.float32)
    b = np.ones((4, 5), np.float32)
    d = np.empty((3, 5), np.float32)
    with pytest.raises(TypeError, match="'a' must be an array, not None|a must be an array, not None"):
        call_matmul(None, b, d=d)
    with pytest.raises(ValueError, match="execution is out of range"):
        call_matmul(a, b, d=d, execution=7)
    with pytest.raises(TypeError, match="num_threads must be an int"):
        call_matmul(a, b, d=d, num_threads="2")
    with pytest.raises(ValueError, match="epilogue is out of range"):
        call_matmul(a, b, d=d, epilogue=2**40)
    with pytest.raises(ValueError, match="stream is not a valid address"):
        call_matmul(a, b, d=d, stream=2**64)
    with pytest.raises(TypeError, match="alpha must be a number"):
        call_matmul(a, b, d=d, alpha="1")
    call_matmul(a, b, d=d, epilogue="identity", alpha=np.float64(2.0))
    np.testing.assert_array_equal(d, np.full((3, 5), 8.0))
    assert matmul_specs(np.ones((2, 1, 3, 4)), np.ones((5, 4, 6)))[0][1] == (2, 5, 3, 6)
    with pytest.raises(fusemath.ShapeError, match="K = 4"):
        matmul_specs(a, a)


def test_no_reference_leaks():
    a = np.ones((8, 8))
    b = np.ones((8, 8))
    d = np.empty((8, 8))
    dl = DLPackOnly(a)
    x = np.ones((8, 8))
    before = [sys.getrefcount(v) for v in (a, b, d, x)]
    for _ in range(200):
        call_matmul(a, b, d=d)
        call_matmul(dl, b, d=d)
        C.tensor_info(dl)
        C.data_ptr(d)
        x[...] = 1.0
        call_matmul(x, b, d=x)  # an out= overlapping a: the temporary path releases it too
        with pytest.raises(ValueError):
            call_matmul(a, b, d=np.empty((8, 7)))  # a shape error path releases too
        with pytest.raises(TypeError):
            call_matmul(a, b, d=d, alpha="x")
    np.testing.assert_array_equal(x, np.full((8, 8), 8.0))
    after = [sys.getrefcount(v) for v in (a, b, d, x)]
    assert before == after


# ---------------------------------------------------------------------------
# DLPack
# ---------------------------------------------------------------------------
class DLPackOnly:
    """Wraps a NumPy array so that only __dlpack__ is visible (like a torch CPU tensor)."""

    def __init__(self, x, legacy=False):
        self._x = x
        self._legacy = legacy
        self.calls = []

    def __dlpack__(self, *args, **kwargs):
        self.calls.append(kwargs)
        if self._legacy:
            if kwargs:
                raise TypeError("__dlpack__() got an unexpected keyword argument")
            return self._x.__dlpack__()
        return self._x.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._x.__dlpack_device__()


@pytest.mark.parametrize("legacy", [False, True])
def test_dlpack_numpy_producer(legacy):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[::-1, 1::2]
    wrapped = DLPackOnly(x, legacy=legacy)
    refs = sys.getrefcount(x)
    addr, device, dtname, shape, strides = C.tensor_info(wrapped)
    assert addr == x.__array_interface__["data"][0]
    assert (device, dtname, shape) == ((1, 0), "f32", (4, 3))
    assert strides == (-6, 2)
    assert wrapped.calls[0] == {"max_version": (1, 0)}
    if legacy:
        assert wrapped.calls[1] == {}
    assert sys.getrefcount(x) == refs, "the capsule (and its reference to x) was released"
    b = np.ones((3, 2), np.float32)
    d = np.empty((4, 2), np.float32)
    call_matmul(wrapped, b, d=d)
    np.testing.assert_array_equal(d, x @ b)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    pass


_DELETER_V = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensorVersioned))
_DLManagedTensorVersioned._fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                                      ("deleter", _DELETER_V), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class CraftedDLPack:
    """A hand-made DLPack producer over a NumPy buffer, with a byte_offset and a deleter that
    counts its calls. Its capsules have no destructor, so only a consumer that follows the
    protocol (rename, then call the deleter) ever calls the deleter."""

    def __init__(self, base, byte_offset, shape, strides, versioned, flags=0, device=(1, 0), major=1,
                 dtype=(2, 32)):
        self.base = base
        self.deleted = 0
        self.versioned = versioned
        n = len(shape)
        self._shape = (ctypes.c_int64 * n)(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * n)(*strides)
        if versioned:
            self.mt = _DLManagedTensorVersioned()
            self.mt.version = _DLPackVersion(major, 0)
            self.mt.flags = flags
            self._deleter = _DELETER_V(self._on_delete)
            self._name = b"dltensor_versioned"
        else:
            self.mt = _DLManagedTensor()
            self._deleter = _DELETER(self._on_delete)
            self._name = b"dltensor"
        self.mt.deleter = self._deleter
        t = self.mt.dl_tensor
        t.data = base.ctypes.data
        t.device = _DLDevice(*device)
        t.ndim = n
        t.dtype = _DLDataType(dtype[0], dtype[1], 1)
        t.shape = self._shape
        t.strides = self._strides
        t.byte_offset = byte_offset

    def _on_delete(self, ptr):
        self.deleted += 1

    def __dlpack__(self, max_version=None, stream=None, dl_device=None, copy=None):
        if self.versioned and max_version is None:
            raise AssertionError("consumer must ask for max_version")
        return _PyCapsule_New(ctypes.addressof(self.mt), self._name, None)

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_byte_offset_strides_and_deleter(versioned):
    base = np.arange(40, dtype=np.float32)
    # logical (3, 4) view starting at element 5 with row stride 8 and column stride 1
    prod = CraftedDLPack(base, 5 * 4, (3, 4), (8, 1), versioned)
    addr, device, dtname, shape, strides = C.tensor_info(prod)
    assert addr == base.ctypes.data + 20 and shape == (3, 4) and strides == (8, 1) and dtname == "f32"
    assert prod.deleted == 1, "the consumer calls the deleter exactly once"
    expected_a = np.lib.stride_tricks.as_strided(base[5:], (3, 4), (32, 4))
    b = np.arange(8, dtype=np.float32).reshape(4, 2)
    d = np.empty((3, 2), np.float32)
    call_matmul(prod, b, d=d)
    np.testing.assert_array_equal(d, expected_a @ b)
    assert prod.deleted == 2
    # compact (strides == NULL) tensors are row-major
    prod2 = CraftedDLPack(base, 4, (2, 4), None, versioned)
    assert C.tensor_info(prod2)[3:] == ((2, 4), (4, 1))
    assert C.tensor_info(prod2)[0] == base.ctypes.data + 4
    assert prod2.deleted == 2


def test_dlpack_versioned_read_only_output_rejected():
    base = np.zeros(16, np.float32)
    prod = CraftedDLPack(base, 0, (2, 2), None, versioned=True, flags=1)
    with pytest.raises(ValueError, match="argument 'out' is read-only"):
        call_matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), d=prod)
    assert prod.deleted == 1, "deleter called on the error path too"
    assert C.tensor_info(prod)[2] == "f32"  # as an input it is fine
    assert prod.deleted == 2


def test_dlpack_copied_output_rejected():
    base = np.zeros(16, np.float32)
    prod = CraftedDLPack(base, 0, (2, 2), None, versioned=True, flags=2)  # DLPACK_FLAG_BITMASK_IS_COPIED
    with pytest.raises(ValueError, match="argument 'out'.*copy"):
        call_matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), d=prod)
    assert prod.deleted == 1


def test_dlpack_bad_capsules():
    base = np.zeros(16, np.float32)
    newer = CraftedDLPack(base, 0, (2, 2), None, versioned=True, major=2)
    with pytest.raises(TypeError, match="DLPack version 2"):
        C.tensor_info(newer)
    assert newer.deleted == 0, "an unsupported capsule is left to its producer"
    # CUDA capsules are taken (zero-copy; the library checks the device when it runs)
    on_gpu = CraftedDLPack(base, 0, (2, 2), None, versioned=False, device=(2, 0))
    assert C.tensor_info(on_gpu)[:3] == (base.ctypes.data, (2, 0), "f32")
    assert on_gpu.deleted == 1
    elsewhere = CraftedDLPack(base, 0, (2, 2), None, versioned=False, device=(8, 0))  # kDLMetal
    with pytest.raises(fusemath.DeviceError, match="argument 'obj'.*device"):
        C.tensor_info(elsewhere)
    assert elsewhere.deleted == 1
    weird = CraftedDLPack(base, 0, (2, 2), None, versioned=True, dtype=(2, 24))
    with pytest.raises(TypeError, match="unsupported DLPack dtype"):
        C.tensor_info(weird)
    assert weird.deleted == 1

    class NotACapsule:
        def __dlpack__(self, **kw):
            return 42

    with pytest.raises(TypeError, match="DLPack capsule"):
        C.tensor_info(NotACapsule())

    class Raises:
        def __dlpack__(self, **kw):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        C.tensor_info(Raises())


def test_dlpack_through_the_numpy_front():
    base = np.arange(40, dtype=np.float64)
    prod = CraftedDLPack(base, 8 * 3, (4, 5), (5, 1), versioned=True, dtype=(2, 64))
    b = np.ones((5, 2))
    d = fusemath.matmul(prod, b)
    np.testing.assert_array_equal(d, base[3:23].reshape(4, 5) @ b)


# ---------------------------------------------------------------------------
# Module-level functions and state
# ---------------------------------------------------------------------------
def test_epilogue_parse_and_format():
    E = fusemath.Epilogue
    cases = {
        "identity": E.DEFAULT, "none": E.DEFAULT, "relu": E.RELU, "gelu": E.GELU, "bias": E.BIAS,
        "bias+relu": E.RELU_BIAS, "RELU_BIAS": E.RELU_BIAS, "relu_aux": E.RELU_AUX, "GELU_AUX": E.GELU_AUX,
        "RELU_AUX_BIAS": E.RELU_AUX_BIAS, "gelu_aux_bias": E.GELU_AUX_BIAS, "gelu+bias+aux": E.GELU_AUX_BIAS,
    }
    for text, bits in cases.items():
        assert C.epilogue_parse(text) == bits, text
        assert E.parse(text) == bits
        assert C.epilogue_parse(C.epilogue_format(bits)) == bits
    assert C.epilogue_format(3) == "bias+relu" and E.RELU_BIAS.canonical_name == "bias+relu"
    assert C.epilogue_format(0) == "identity"
    with pytest.raises(ValueError, match="'swish'"):
        C.epilogue_parse("relu+swish")
    with pytest.raises(TypeError):
        C.epilogue_parse(3)
    with pytest.raises(ValueError):
        C.epilogue_format(1 << 10)
    with pytest.raises(ValueError):
        C.epilogue_format(-1)
    with pytest.raises(ValueError):
        C.epilogue_parse("relu\0gelu")


def test_threads_backends_versions(restore_threads):
    fusemath.set_num_threads(1)
    assert fusemath.get_num_threads() == 1
    fusemath.set_num_threads(3)
    assert fusemath.get_num_threads() == 3
    fusemath.set_num_threads(0)
    assert fusemath.get_num_threads() >= 1
    infos = fusemath.backends()
    assert any(i.name == "openblas" and i.device == "cpu" and i.available for i in infos)
    for info in infos:
        assert isinstance(info, fusemath.BackendInfo)
        assert (info.why is None) == info.available or info.available
    assert isinstance(fusemath.cuda_device_count(), int) and fusemath.cuda_device_count() >= 0
    assert fusemath.__version__ == fusemath.library_version()
    major, minor, patch = (int(x) for x in fusemath.__version__.split("."))
    assert C.version_number == major * 10000 + minor * 100 + patch
    assert C.header_version_number == C.version_number, "extension built against another header"
    assert C.relu_mask_row_bytes(1) == 16 and C.relu_mask_row_bytes(129) == 32
    assert C.status_name(2) == "FM_ERR_SHAPE"


def test_plan_cache():
    a = np.ones((5, 7), np.float32)
    fusemath.matmul(a, a.T)
    assert fusemath.cache_size() >= 1
    fusemath.clear_cache()
    assert fusemath.cache_size() == 0


def test_public_names():
    for name in fusemath.__all__:
        assert hasattr(fusemath, name), name


def test_second_module_instance_has_its_own_state():
    """Multi-phase init: a second instance gets its own context and exception classes."""
    spec = importlib.util.find_spec("fusemath._fusemath")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    assert other is not C
    assert other.ShapeError is not C.ShapeError and issubclass(other.ShapeError, ValueError)
    a = np.ones((2, 3))
    d = np.empty((2, 2))
    from fusemath._arrays import _NUMPY_DTYPES
    assert other.register_array_library("numpy", other.STYLE_NUMPY, None, dict(_NUMPY_DTYPES), np.empty, None, None,
                                        None, None, None, 0) == 0
    plan = call_matmul(a, a.T, d=d, plan=True, module=other)
    with pytest.raises(other.ShapeError):
        call_matmul(a, a, d=d, plan=True, module=other)
    other.set_num_threads(1)
    plan.execute(C.data_ptr(a), C.data_ptr(a.T), None, None, C.data_ptr(d), None)
    np.testing.assert_array_equal(d, np.full((2, 2), 3.0))
    del other  # the plan keeps that module (and its context) alive
    import gc

    gc.collect()
    plan.execute(C.data_ptr(a), C.data_ptr(a.T), None, None, C.data_ptr(d), None)
    assert "matmul" in plan.describe()
    del plan
    gc.collect()


def test_library_index_is_an_int_not_a_bool():
    """True would pass for index 1 (bool is an int subclass): refused like any non-index."""
    from fusemath import _fusemath as C

    for bad in (True, False, -1, 10**6, "0", 1.0):
        with pytest.raises((ValueError, TypeError)):
            C.current_stream(bad, 0)
    assert C.current_stream(0, -1) == 0  # NumPy (index 0): no stream


def test_low_level_fft_messages_name_the_entry():
    """The C entry points name the offending entry (axes[1], prolog['name']), not a
    placeholder, for callers that bypass fusemath.fft's own checks."""
    from fusemath import _fusemath as C

    x = np.ones((4, 4), complex)
    out = np.empty_like(x)
    opts = [0, False, (0, 99), 0, 0, 0, 0, 0, 0, None, 0, None, None, None, None, None, 0, 0]

    def plan_fft():
        return C.call(C.OP_FFT, C.CALL_PLAN, 0, (x, out, None, None), tuple(opts))

    with pytest.raises(ValueError, match=r"axes\[1\] is out of range"):
        plan_fft()
    opts[2] = (0, 1)
    opts[13] = "cb\0x"  # the prolog's symbol name
    opts[12] = "__device__ void f() {}"
    with pytest.raises(ValueError, match=r"prolog\['name'\] contains a NUL"):
        plan_fft()
