"""Concurrency: many Python threads on one plan / the stateless call, and the GIL released
during compute. No timing assertions: the GIL test checks that another Python thread makes
progress *while* the product runs, which is impossible if the GIL is held."""
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fusemath
from mmref import assert_close, call_matmul, make, reference

NTHREADS = 8


def test_stateless_matmul_from_8_threads_with_different_data(rng):
    cases = []
    for i in range(48):
        dtype = [np.float32, np.float64, np.complex64, np.complex128][i % 4]
        m, k, n = 30 + i, 17 + (i % 5), 25 + 2 * i
        a = make(rng, (m, k), dtype, ["C", "T", "strided"][i % 3])
        b = make(rng, (k, n), dtype)
        bias = make(rng, (n,), dtype)
        epi = "relu" if np.dtype(dtype).kind == "f" and i % 2 else None
        cases.append((a, b, bias, epi, dtype))

    def work(case):
        a, b, bias, epi, _ = case
        return fusemath.matmul(a, b, bias=bias, epilogue=epi)

    with ThreadPoolExecutor(NTHREADS) as pool:
        results = list(pool.map(work, cases))
    for (a, b, bias, epi, dtype), d in zip(cases, results):
        _, ref, scale = reference(a, b, bias=bias, act=epi)
        assert_close(d, ref, scale, dtype, a.shape[1])


def test_one_matmul_object_from_8_threads(rng):
    a = make(rng, (160, 70), np.float32)
    b = make(rng, (70, 90), np.float32)
    bias = make(rng, (90,), np.float32)
    mm = fusemath.Matmul(a, b)
    mm.plan(epilogue="RELU_AUX_BIAS", bias=bias)
    barrier = threading.Barrier(NTHREADS)

    def work(_):
        barrier.wait()
        return [mm.execute() for _ in range(20)]

    with ThreadPoolExecutor(NTHREADS) as pool:
        batches = list(pool.map(work, range(NTHREADS)))
    pre, ref, scale = reference(a, b, bias=bias, act="relu")
    first_d, first_aux = batches[0][0]
    assert_close(first_d, ref, scale, np.float32, 70)
    for batch in batches:
        for d, aux in batch:
            np.testing.assert_array_equal(d, first_d)
            np.testing.assert_array_equal(aux["relu_aux"], first_aux["relu_aux"])
    mm.free()


def test_one_plan_from_8_threads_with_different_pointers(rng):
    C = fusemath._fusemath
    m, k, n = 120, 48, 64
    dtype = np.float64
    template_a = make(rng, (m, k), dtype)
    template_b = make(rng, (k, n), dtype)
    template_bias = make(rng, (n,), dtype)
    template_d = np.empty((m, n), dtype)
    plan = call_matmul(template_a, template_b, bias=template_bias, d=template_d, plan=True, epilogue="bias+gelu")
    inputs = [(make(rng, (m, k), dtype), make(rng, (k, n), dtype), make(rng, (n,), dtype)) for _ in range(32)]
    outputs = [np.empty((m, n), dtype) for _ in inputs]
    barrier = threading.Barrier(NTHREADS)

    def work(t):
        barrier.wait()
        for i in range(t, len(inputs), NTHREADS):
            a, b, bias = inputs[i]
            plan.execute(C.data_ptr(a), C.data_ptr(b), None, C.data_ptr(bias), C.data_ptr(outputs[i]), None)

    with ThreadPoolExecutor(NTHREADS) as pool:
        list(pool.map(work, range(NTHREADS)))
    for (a, b, bias), d in zip(inputs, outputs):
        _, ref, scale = reference(a, b, bias=bias, act="gelu")
        assert_close(d, ref, scale, dtype, k)


def test_free_while_other_threads_execute(rng):
    """free() on the Python object while executions run must neither crash nor corrupt."""
    a = make(rng, (200, 100), np.float64)
    b = make(rng, (100, 150), np.float64)
    mm = fusemath.Matmul(a, b)
    mm.plan()
    expected = a @ b
    errors, results = [], []
    barrier = threading.Barrier(5)

    def work():
        barrier.wait()
        for _ in range(30):
            try:
                results.append(mm.execute())
            except fusemath.InvalidStateError:
                errors.append(1)
                return

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    barrier.wait()
    time.sleep(0.002)
    mm.free()
    for t in threads:
        t.join()
    for d in results:
        np.testing.assert_allclose(d, expected, rtol=1e-12, atol=1e-10)
    with pytest.raises(fusemath.InvalidStateError):
        mm.execute()


def test_reset_keeps_memory_of_running_executions(rng):
    """An execute() in flight holds the operands it started with, so a concurrent
    reset_operands()/free() that drops their last reference cannot free memory under it.
    Deterministic version: hold the per-call closure as a running execute() does."""
    import gc
    import weakref

    a_old = make(rng, (50, 40), np.float64)
    b = make(rng, (40, 30), np.float64)
    expected = a_old @ b
    mm = fusemath.Matmul(a_old, b)
    mm.plan()
    in_flight = mm._run  # what execute() holds while the library runs
    a_ref = weakref.ref(a_old)
    del a_old
    mm.reset_operands(a=make(rng, (50, 40), np.float64))
    gc.collect()
    assert a_ref() is not None, "the old operand must live while an execution may use it"
    np.testing.assert_allclose(in_flight(None), expected, rtol=1e-12, atol=1e-12)
    del in_flight
    gc.collect()
    assert a_ref() is None, "and be released afterwards"
    mm.free()


class Progress:
    """A background Python thread that timestamps each loop iteration."""

    def __init__(self):
        self.stamps = []
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        stamps, clock = self.stamps, time.perf_counter
        while not self.stop:
            stamps.append(clock())
            for _ in range(50):  # pure-Python work that needs the GIL
                pass

    def __enter__(self):
        self.thread.start()
        while not self.stamps:
            time.sleep(0.001)
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()

    def during(self, t0, t1):
        """Iterations that ran in the middle half of [t0, t1]. (Even with the GIL held
        throughout the call, the other thread gets one switch interval just before the call
        and one just after it, before t1 is read; those fall outside the middle half when
        the call is long compared to the switch interval.)"""
        lo, hi = t0 + 0.25 * (t1 - t0), t1 - 0.25 * (t1 - t0)
        return sum(1 for s in list(self.stamps) if lo < s < hi)


@pytest.fixture
def one_library_thread(restore_threads):
    fusemath.set_num_threads(1)  # leaves a core for the Python thread on small machines
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.parametrize("how", ["matmul", "Matmul.execute", "Plan.execute"])
def test_gil_released_during_compute(rng, one_library_thread, how):
    n = 1200
    a = make(rng, (n, n), np.float64)
    b = make(rng, (n, n), np.float64)
    bias = make(rng, (n,), np.float64)
    if how == "matmul":
        def run():
            return fusemath.matmul(a, b, bias=bias, epilogue="relu")
    elif how == "Matmul.execute":
        mm = fusemath.Matmul(a, b)
        mm.plan(epilogue="relu", bias=bias)
        run = mm.execute
    else:
        C = fusemath._fusemath
        out = np.empty((n, n))
        plan = call_matmul(a, b, bias=bias, d=out, plan=True, epilogue="bias+relu")
        ptrs = (C.data_ptr(a), C.data_ptr(b), None, C.data_ptr(bias), C.data_ptr(out), None)

        def run():
            plan.execute(*ptrs)
            return out
    run()  # warm up (plan cache, thread pool)
    with Progress() as progress:
        counts, spans = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            d = run()
            t1 = time.perf_counter()
            counts.append(progress.during(t0, t1))
            spans.append(round((t1 - t0) * 1e3, 1))
    assert max(counts) > 0, (
        f"{how}: a Python thread made no progress while the product ran ({counts} iterations in calls "
        f"of {spans} ms); the GIL was held"
    )
    np.testing.assert_allclose(d, np.maximum(a @ b + bias, 0), rtol=1e-10, atol=1e-10)
