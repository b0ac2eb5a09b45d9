"""Helpers the GPU benchmark scripts share (run as `python benchmarks/<name>.py`, so this folder
is on sys.path, for their child processes too)."""
import time


def err(exc: BaseException) -> str:
    """An exception as one line of at most ~600 characters, for the JSON."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 600 else text[:600] + " ..."


class WallEvent:
    """Stand-in for a CUDA event in --cpu-dry-run (wall clock)."""

    t = 0.0

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass


def cpu_model() -> str:
    """The CPU's model name (fusemath.bench's), "unknown" when fusemath is not importable."""
    try:
        from fusemath.bench import cpu_model as model
    except ImportError:
        return "unknown"
    return model()
