"""fusemath.random: counter-based random numbers (Philox4x32-10) with numpy.random.Generator's names.

    >>> import fusemath.random as fr
    >>> g = fr.default_rng(42)
    >>> x = g.standard_normal((1000, 1000), dtype="float32")
    >>> g.advance(10**9)                      # skip a billion values, O(1)
    >>> a, b = g.spawn(2)                     # independent children

A generator is a key (the seed, 64 bits) and a position in its stream; every value is a function of
(seed, position, distribution, dtype, mode) only: never of the thread count or of how the library
splits the work. Each call advances the position by the number of values it makes.

Modes (docs/design.md, "Random numbers"):
  ``"portable"`` (default): the library's own arithmetic (fusion/philox_portable.h), the same bits
      on every device; ``random()`` is in [0, 1) as NumPy's.
  ``"curand"``: the values libcurand's ``CURAND_RNG_PSEUDO_PHILOX4_32_10`` generator gives for the
      same seed and offset (uniform in (0, 1]); no exponential, no integers. cuRAND's float64 calls shift the
      stream of the calls after them; the generator tracks one contiguous run of float64 calls (a
      float64 call after 32-bit calls that followed float64 calls raises NotSupportedError:
      set ``state`` to start over, as ``curandSetGeneratorOffset`` does).

Devices: ``device="cpu"`` (NumPy results) or ``"cuda"`` / ``"cuda:N"`` (CuPy results by default;
``like=`` a torch tensor gives torch tensors). ``out=`` fills a NumPy array (cpu) or a CuPy array /
torch tensor (cuda) in place, on the caller's current stream; an out on another device than the
generator is a DeviceError. Portable mode gives the same bits on both; curand mode on the GPU is
libcurand's device generator (normals differ from the host generator's in the last bits). On the GPU
a draw with size=None returns a 0-d array (no synchronisation), not a Python float. Distribution
parameters are scalars.
"""
import math
import operator
import os
import sys
import threading
from typing import Any, Optional

import numpy as np

from . import _fusemath as _C
from . import _arrays
from ._arrays import NUMPY, _NUMPY_DTYPES, lib_of

__all__ = ["Generator", "default_rng"]

_call, _OP, _RUN = _C.call, _C.OP_RNG, _C.CALL_RUN
_FM_NAME = {dt: name for name, dt in _NUMPY_DTYPES.items()}
_MODES = {"portable": _C.RNG_PORTABLE, "curand": _C.RNG_CURAND}
# numpy.random.Generator's methods this one does not have (docs/api.md lists them)
NOT_IMPLEMENTED = (
    "choice", "bytes", "shuffle", "permutation", "permuted", "beta", "binomial", "chisquare",
    "dirichlet", "f", "gamma", "geometric", "gumbel", "hypergeometric", "laplace", "logistic", "logseries",
    "multinomial", "multivariate_hypergeometric", "multivariate_normal", "negative_binomial",
    "noncentral_chisquare", "noncentral_f", "pareto", "power", "rayleigh", "standard_cauchy",
    "standard_gamma", "standard_t", "triangular", "vonmises", "wald", "weibull", "zipf",
)


def _seed_arg(seed: Any, where: str) -> int:
    if seed is None:
        return int.from_bytes(os.urandom(8), "little")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{where}: seed must be None or an int in [0, 2**64), not {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"{where}: seed = {seed}, expected an int in [0, 2**64)")
    return seed


def _device_arg(device: Any, where: str) -> int:
    """-1 for "cpu", N for "cuda:N" ("cuda": 0), _BEST for "best" (NumPy results, drawn where the
    machine profile predicts them soonest: the values are the same on every device)."""
    if not isinstance(device, str):
        raise TypeError(f"{where}: device must be a string ('cpu', 'cuda' or 'cuda:N'), not {type(device).__name__}")
    if device == "cpu":
        return -1
    if device == "best":
        return _BEST
    if device == "cuda":
        return 0
    head, _, idx = device.partition(":")
    if head == "cuda" and idx.isdigit() and str(int(idx)) == idx:
        return int(idx)
    raise ValueError(f"{where}: device = {device!r}, expected 'cpu', 'cuda', 'cuda:N' (N >= 0) or 'best'")


_BEST = -2


def _device_text(dev: int) -> str:
    return "best" if dev == _BEST else "cpu" if dev < 0 else f"cuda:{dev}"


def _cupy_index(where: str) -> int:
    """The array library a GPU generator's results default to."""
    if "cupy" not in sys.modules:
        try:
            import cupy  # noqa: F401
        except Exception as exc:
            raise _C.UnavailableError(f"{where}: a generator on the GPU returns CuPy arrays and CuPy is not "
                                      f"importable ({exc}); pass like= a torch tensor or out=") from None
    return _arrays._lib("cupy").index


def _real(v: Any, name: str, where: str) -> float:
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iuf":
        return float(v)
    raise TypeError(f"{where}: {name} must be a real number (array parameters are not supported), "
                    f"not {type(v).__name__}")


def _size_arg(size: Any, where: str) -> tuple:
    if size is None:
        return ()
    try:
        dims = (operator.index(size),)
    except TypeError:
        try:
            dims = tuple(operator.index(d) for d in size)
        except TypeError:
            raise TypeError(f"{where}: size must be None, an int or a tuple of ints, not {size!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"{where}: size = {size!r} has a negative entry, expected entries >= 0")
    return dims


class Generator:
    """numpy.random.Generator's interface over fusemath's Philox4x32-10 stream.

    ``Generator(seed=None, *, device="cpu", mode="portable")``: seed an int in [0, 2**64) (None:
    64 bits from os.urandom); device "cpu", "cuda" or "cuda:N" (where draws are made and returned), or
    "best" (NumPy results, drawn where fusemath's machine profile predicts them soonest, the copy back
    included: portable mode's values are the same on every device). ``state`` is ``{"seed", "position",
    "mode", "f64_run"}``; ``advance(n)``
    skips n values; ``spawn(k)`` derives children as NumPy's SeedSequence does; generators pickle.
    """

    def __init__(self, seed: Any = None, *, device: str = "cpu", mode: str = "portable"):
        where = "fusemath.random.Generator"
        self._dev = _device_arg(device, where)
        if mode not in _MODES:
            raise _C.InvalidArgumentError(f"{where}: mode = {mode!r}, expected 'portable' or 'curand'")
        if mode == "curand" and self._dev == _BEST:  # its GPU normals differ from the host's in the last bits
            raise _C.InvalidArgumentError(f"{where}: mode = 'curand' with device = 'best': curand mode's values "
                                          "depend on the device; use mode='portable' or name the device")
        self._seed = _seed_arg(seed, where)
        self._mode = mode
        self._pos = 0
        self._run = (0, 0)  # curand mode: [a, b), the positions of the run of float64 calls
        self._entropy, self._spawn_key, self._children = self._seed, (), 0
        self._freed = False
        self._last = None  # (library index, options) of the last draw: what describe() plans again
        self._lock = threading.Lock()  # one draw at a time: two threads never get the same positions

    # ---- the stream ----
    def _live(self, what: str) -> str:
        where = f"fusemath.random.Generator.{what}"
        if self._freed:
            raise _C.InvalidStateError(f"{where}: the generator was freed")
        return where

    @property
    def device(self) -> str:
        """Where the generator draws: "cpu", "cuda:N" or "best"."""
        return _device_text(self._dev)

    def _fill(self, what: str, dist: int, p0: Any, p1: Any, size: Any, dtype: Any, out: Any, like: Any = None,
              p2: int = 0, scalar=lambda a: a.item()):
        with self._lock:
            where = self._live(what)
            res = self._draw(where, self._lib_index(where, out, like), dist, p0, p1, size, dtype, out, p2)
        if size is None and out is None and self._dev < 0:  # NumPy: a Python float (integers: a NumPy scalar)
            return scalar(res[()])
        return res

    def _lib_index(self, where: str, out: Any, like: Any) -> int:
        """The array library results are made with: out's, like's, else NumPy (cpu) / CuPy (cuda)."""
        if out is not None:
            lib = lib_of(out)
            return NUMPY.index if lib is None else lib.index
        if like is not None:
            lib = lib_of(like)
            if lib is not None and lib.name == "cupy" and self._dev < 0:
                raise _C.DeviceError(f"{where}: like is a CuPy array but the generator is on {self.device} (CuPy arrays "
                                     "live on a GPU); use a generator made with device='cuda', or like= a NumPy "
                                     "array or torch CPU tensor")
            if lib is not None:
                return lib.index
            if self._dev >= 0 or not isinstance(like, np.ndarray):
                raise TypeError(f"{where}: like must be a CuPy array or torch tensor (its library makes the "
                                f"result), not {type(like).__name__}")
        return NUMPY.index if self._dev < 0 else _cupy_index(where)

    def _draw(self, where: str, li: int, dist: int, p0: Any, p1: Any, size: Any, dtype: Any, out: Any,
              p2: int = 0):
        dt = np.dtype(dtype)
        if out is not None and size is None:
            shape = tuple(getattr(out, "shape", ()))
        else:
            shape = _size_arg(size, where)
        n = math.prod(shape)
        f64 = dt == np.float64
        run = self._run
        execution = (_C.EXECUTION_BEST if self._dev == _BEST else _C.EXECUTION_CPU if self._dev < 0
                     else _C.EXECUTION_CUDA)
        opts = (dist, _MODES[self._mode], self._seed, p0, p1, execution, max(self._dev, 0), 0, shape,
                _FM_NAME.get(dt) or str(dt), self._pos, run[0], run[1], p2)
        if self._mode == "curand" and f64 and n > 0 and run[0] != run[1] and run[1] // 4 != self._pos // 4:
            _call(_OP, _C.CALL_SPECS, li, (out,), opts, None, 3, where)  # the core's errors first
            raise _C.NotSupportedError(
                f"{where}: curand mode reproduces one run of float64 calls, and 32-bit calls came after the "
                f"last one (positions {run[0]}..{run[1]}); set state to start a new run")
        res = _call(_OP, _RUN, li, (out,), opts, None, 3, where)
        self._last = (li, opts)
        if self._mode == "curand" and f64 and n > 0:
            self._run = (run[0], self._pos + n) if run[0] != run[1] else (self._pos, self._pos + n)
        self._pos += n
        return res

    def random(self, size=None, dtype=np.float64, out=None, *, like=None):
        """Uniform values in [0, 1) (curand mode: (0, 1]). like: an array whose library makes the result."""
        return self._fill("random", _C.RNG_UNIFORM, 0.0, 1.0, size, dtype, out, like)

    def uniform(self, low=0.0, high=1.0, size=None, *, dtype=np.float64, out=None, like=None):
        """low + (high - low) * random(); finite low < high."""
        w = "fusemath.random.Generator.uniform"
        low, high = _real(low, "low", w), _real(high, "high", w)
        return self._fill("uniform", _C.RNG_UNIFORM, low, high, size, dtype, out, like)

    def standard_normal(self, size=None, dtype=np.float64, out=None, *, like=None):
        """Normal values, mean 0 and standard deviation 1 (Box-Muller)."""
        return self._fill("standard_normal", _C.RNG_NORMAL, 0.0, 1.0, size, dtype, out, like)

    def normal(self, loc=0.0, scale=1.0, size=None, *, dtype=np.float64, out=None, like=None):
        """standard_normal() * scale + loc; scale >= 0."""
        w = "fusemath.random.Generator.normal"
        loc, scale = _real(loc, "loc", w), _real(scale, "scale", w)
        return self._fill("normal", _C.RNG_NORMAL, loc, scale, size, dtype, out, like)

    def lognormal(self, mean=0.0, sigma=1.0, size=None, *, dtype=np.float64, out=None, like=None):
        """exp(normal(mean, sigma)); sigma >= 0."""
        w = "fusemath.random.Generator.lognormal"
        mean, sigma = _real(mean, "mean", w), _real(sigma, "sigma", w)
        return self._fill("lognormal", _C.RNG_LOGNORMAL, mean, sigma, size, dtype, out, like)

    def standard_exponential(self, size=None, dtype=np.float64, method="inv", out=None, *, like=None):
        """-log(u), u uniform in (0, 1] (inversion whatever method says: 'zig' is accepted too)."""
        if method not in ("inv", "zig"):
            raise _C.InvalidArgumentError(f"fusemath.random.Generator.standard_exponential: method = "
                                          f"{method!r}, expected 'inv' or 'zig'")
        return self._fill("standard_exponential", _C.RNG_EXPONENTIAL, 1.0, 0.0, size, dtype, out, like)

    def exponential(self, scale=1.0, size=None, *, dtype=np.float64, out=None, like=None):
        """standard_exponential() * scale; scale >= 0."""
        w = "fusemath.random.Generator.exponential"
        return self._fill("exponential", _C.RNG_EXPONENTIAL, _real(scale, "scale", w), 0.0, size, dtype, out, like)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        """Uniform integers in [low, high) ([low, high] with endpoint=True; high None: [0, low)),
        exact and unbiased (Lemire's multiply-shift with rejection; docs/design.md); int8 .. int64,
        uint8 .. uint32; portable mode only. size=None gives a NumPy scalar of dtype, as NumPy's."""
        w = "fusemath.random.Generator.integers"
        if high is None:
            low, high = 0, low
        for name, v in (("low", low), ("high", high)):
            if np.ndim(v) != 0:
                raise NotImplementedError(f"{w}: array-valued {name} is not implemented (pass a scalar)")
        if not endpoint and isinstance(high, (int, np.integer)) and int(high) == 1 << 63:
            high, endpoint = (1 << 63) - 1, True  # NumPy's exclusive 2**63 (int64's top): the same range
        return self._fill("integers", _C.RNG_INTEGERS, low, high, size, dtype, None, p2=int(bool(endpoint)),
                          scalar=lambda a: a)

    def poisson(self, lam=1.0, size=None):
        """Poisson(lam) as int64 (NumPy's); lam = 0 gives zeros. Portable: exact inversion below 10, PTRS
        (NumPy's method) from 10; curand mode: libcurand's curandGeneratePoisson values, 0 < lam <= 400000."""
        w = "fusemath.random.Generator.poisson"
        if np.ndim(lam) != 0:
            raise NotImplementedError(f"{w}: array-valued lam is not implemented (pass a scalar)")
        return self._fill("poisson", _C.RNG_POISSON, _real(lam, "lam", w), 0.0, size, np.int64, None)

    def random_raw(self, size=None, out=None, *, like=None):
        """The stream's 32-bit words themselves (uint32; fusemath's, not NumPy's 64-bit random_raw)."""
        return self._fill("random_raw", _C.RNG_RAW, 0.0, 0.0, size, np.uint32, out, like)

    # ---- position, state, children ----
    def advance(self, n: Any) -> "Generator":
        """Skip n >= 0 values (as n float32 draws would: curand mode's float64 run is kept)."""
        where = self._live("advance")
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"{where}: n must be an int, not {type(n).__name__}")
        with self._lock:  # (the check and the step together: another thread may draw meanwhile)
            if not 0 <= int(n) <= (1 << 63) - 1 - self._pos:
                raise ValueError(f"{where}: n = {n}, expected 0 <= n <= {(1 << 63) - 1 - self._pos} (a position "
                                 "below 2**63)")
            self._pos += int(n)
        return self

    @property
    def state(self) -> dict:
        self._live("state")
        with self._lock:  # a position and f64_run that belong together
            return {"seed": self._seed, "position": self._pos, "mode": self._mode, "f64_run": self._run}

    @state.setter
    def state(self, value: dict) -> None:
        where = self._live("state")
        if not isinstance(value, dict) or "seed" not in value or "position" not in value:
            raise TypeError(f"{where}: state must be a dict with 'seed' and 'position'")
        pos = value["position"]
        is_int = isinstance(pos, (int, np.integer)) and not isinstance(pos, (bool, np.bool_))
        if not is_int or not 0 <= pos < 1 << 63:
            raise ValueError(f"{where}: position = {pos!r}, expected an int in [0, 2**63)")
        mode = value.get("mode", self._mode)
        if mode not in _MODES:
            raise _C.InvalidArgumentError(f"{where}: mode = {mode!r}, expected 'portable' or 'curand'")
        raw = value.get("f64_run", (0, 0))
        try:
            run = tuple(raw)
        except TypeError:
            raise TypeError(f"{where}: f64_run must be a pair (a, b) of ints, not {type(raw).__name__}") from None
        if len(run) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                                    for v in run) or not 0 <= run[0] <= run[1] <= pos:
            raise ValueError(f"{where}: f64_run = {raw!r}, expected (a, b) ints with 0 <= a <= b <= position")
        if mode == "portable" and run[0] != run[1]:  # the run is curand mode's state: every draw would fail
            raise ValueError(f"{where}: f64_run = {raw!r} with mode 'portable', expected (0, 0) (a run of "
                             "float64 calls is curand mode's state)")
        if mode == "portable":
            run = (0, 0)
        seed = _seed_arg(value["seed"], where)
        with self._lock:  # not in the middle of a draw
            self._seed, self._pos, self._run, self._mode = seed, int(pos), (int(run[0]), int(run[1])), mode

    def spawn(self, n_children: Any) -> list:
        """n_children new generators whose seeds are numpy.random.SeedSequence(entropy, spawn_key=key +
        (i,)).generate_state(1, uint64) for this generator's root entropy and spawn key, i counting
        every child spawned so far; they start at position 0 in this generator's mode."""
        where = self._live("spawn")
        if isinstance(n_children, (bool, np.bool_)) or not isinstance(n_children, (int, np.integer)):
            raise TypeError(f"{where}: n_children must be an int, not {type(n_children).__name__}")
        if n_children < 0:
            raise ValueError(f"{where}: n_children = {n_children}, expected >= 0")
        with self._lock:  # two threads spawning at once must not get the same keys (the same streams)
            first = self._children
            self._children += int(n_children)
        kids = []
        for i in range(first, first + int(n_children)):
            key = self._spawn_key + (i,)
            seed = int(np.random.SeedSequence(self._entropy, spawn_key=key).generate_state(1, np.uint64)[0])
            g = Generator(seed, device=self.device, mode=self._mode)
            g._entropy, g._spawn_key = self._entropy, key
            kids.append(g)
        return kids

    def describe(self) -> str:
        """The plan of the last draw, as the planner made it (device and engine, distribution, dtype,
        count; under device="best" the prediction for each device, and a split between the CPU and the
        GPU where there was one), e.g. ``rng cpu/philox normal f32 mode=portable n=1000 threads=2``. Before the
        first draw: InvalidStateError."""
        where = self._live("describe")
        with self._lock:
            last = self._last
        if last is None:
            raise _C.InvalidStateError(f"{where}: nothing drawn yet; describe() tells the plan of the last draw")
        plan = _call(_OP, _C.CALL_PLAN, last[0], (None,), last[1], None, 3, where)
        plan = plan[0] if isinstance(plan, tuple) else plan
        try:
            return plan.describe()
        finally:
            plan.free()

    def free(self) -> None:
        """Retire the generator: every later use raises InvalidStateError."""
        self._freed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __getstate__(self):  # (the last draw's library index belongs to this process)
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_last")}

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._last = None
        self._lock = threading.Lock()

    def __repr__(self):
        return (f"fusemath.random.Generator(seed={self._seed}, device={self.device!r}, mode={self._mode!r}, "
                f"position={self._pos}"
                f"{', freed' if self._freed else ''})")


def _not_implemented(name: str):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"fusemath.random.Generator.{name} is not implemented (numpy.random."
                                  "Generator has it; fusemath has random, uniform, integers, standard_normal, "
                                  "normal, lognormal, standard_exponential, exponential, poisson)")

    method.__name__ = name
    return method


for _name in NOT_IMPLEMENTED:
    setattr(Generator, _name, _not_implemented(_name))


def default_rng(seed: Optional[Any] = None, *, device: str = "cpu", mode: str = "portable") -> Generator:
    """A new Generator (numpy.random.default_rng's form): seed None draws 64 bits from os.urandom;
    device "cpu", "cuda" or "cuda:N"."""
    if isinstance(seed, Generator):
        return seed
    return Generator(seed, device=device, mode=mode)
