"""GPU tests of what concurrent and unusual stream use must not break (PyTorch; marked gpu,
skipped without a GPU or torch): empty batches, more streams than the workspace table has
slots, threads queuing on one shared stream, cudaStreamPerThread from several threads, and one
cuFFT callback plan used on several streams whose parameter block changes in between. Each
result is compared with a float64 reference; a kernel reading freed or foreign memory would
also surface as a CUDA error at the final synchronization.
"""
import threading

import numpy as np
import pytest

import fusemath
import fusemath.fft as ff

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("PyTorch without CUDA", allow_module_level=True)


def dev(x, dtype=torch.float32):
    return torch.tensor(np.ascontiguousarray(x), dtype=dtype, device="cuda")


def host(x):
    return x.double().cpu().numpy() if not x.is_complex() else x.cpu().numpy()


def close(got, want, rel):
    err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
    assert err <= rel, f"max error {err:.3g} relative to max |want|, allowed {rel:g}"


def test_empty_batch(rng):
    """A batch dimension of extent 0: an empty result, and nothing queued (cuBLASLt, given no
    batch count, would run one full product into the empty output)."""
    a = torch.empty((0, 64, 32), device="cuda")
    b = torch.empty((0, 32, 48), device="cuda")
    bias = dev(rng.standard_normal(48))
    assert fusemath.matmul(a, b).shape == (0, 64, 48)
    assert fusemath.matmul(a, b, bias=bias, epilogue="relu").shape == (0, 64, 48)
    d, extra = fusemath.matmul(a, b, epilogue="BGRADB")
    assert d.shape == (0, 64, 48) and extra["bgradb"].shape == (0, 48)
    with fusemath.Matmul(a, b) as m:
        m.plan()
        assert m.execute().shape == (0, 64, 48)
    torch.cuda.synchronize()  # an illegal address from a stray product would raise here
    x, y = rng.standard_normal((64, 32)), rng.standard_normal((32, 48))
    close(host(fusemath.matmul(dev(x), dev(y))), x @ y, 1e-5)  # the context still works


def test_more_streams_than_workspace_slots(rng):
    """80 streams, each created, used once and dropped: the workspace table (64 slots) frees the
    least recently used idle slot instead of refusing the 65th stream (bf16 plans take a
    workspace; before, the 65th stream got UnavailableError)."""
    x, y, bias = rng.standard_normal((256, 128)), rng.standard_normal((128, 192)), rng.standard_normal(192)
    a, b, bb = dev(x, torch.bfloat16), dev(y, torch.bfloat16), dev(bias, torch.bfloat16)
    want = np.maximum(host(a) @ host(b) + host(bb), 0)
    outs = []
    for _ in range(80):
        s = torch.cuda.Stream()
        d = torch.empty((256, 192), dtype=torch.bfloat16, device="cuda")
        torch.cuda.synchronize()
        fusemath.matmul(a, b, bias=bb, epilogue="relu", out=d, stream=s)
        s.synchronize()
        outs.append(d)
        del s
    torch.cuda.synchronize()
    for d in outs:
        close(host(d), want, 2e-2)


def _threads(n, work):
    errors = []

    def run(t):
        try:
            work(t)
        except Exception as exc:  # reported below
            errors.append((t, exc))

    ts = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    assert not errors, errors


def test_threads_sharing_one_stream(rng):
    """Four threads queue stateless BGRADB products (a GEMM, then column sums in two steps
    through the workspace) on one shared stream: each call keeps the workspace until its kernels
    are queued, so no thread's steps land between another's on the same buffer."""
    n_threads, reps = 4, 12
    xs = [rng.standard_normal((384, 96)) for _ in range(n_threads)]
    ys = [rng.standard_normal((96, 320)) for _ in range(n_threads)]
    a = [dev(x) for x in xs]
    b = [dev(y) for y in ys]
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    results = [[None] * reps for _ in range(n_threads)]

    def work(t):
        for i in range(reps):
            results[t][i] = fusemath.matmul(a[t], b[t], epilogue="BGRADB", stream=s)

    _threads(n_threads, work)
    torch.cuda.synchronize()
    for t in range(n_threads):
        want_d, want_g = xs[t] @ ys[t], ys[t].sum(axis=0)
        for d, extra in results[t]:
            close(host(d), want_d, 1e-5)
            close(host(extra["bgradb"]), want_g, 1e-5)


def test_per_thread_default_streams(rng):
    """stream=2 (cudaStreamPerThread) from several threads: one handle, a different stream in
    each thread; their workspaces must be theirs (the table knows streams by id, not handle)."""
    n_threads, reps = 4, 10
    xs = [rng.standard_normal((256, 128)) for _ in range(n_threads)]
    y, bias = rng.standard_normal((128, 256)), rng.standard_normal(256)
    a = [dev(x, torch.bfloat16) for x in xs]
    b, bb = dev(y, torch.bfloat16), dev(bias, torch.bfloat16)
    outs = [[torch.empty((256, 256), dtype=torch.bfloat16, device="cuda") for _ in range(reps)]
            for _ in range(n_threads)]
    torch.cuda.synchronize()

    def work(t):
        for d in outs[t]:
            fusemath.matmul(a[t], b, bias=bb, epilogue="relu", out=d, stream=2)

    _threads(n_threads, work)
    torch.cuda.synchronize()
    for t in range(n_threads):
        want = np.maximum(host(a[t]) @ host(b) + host(bb), 0)
        for d in outs[t]:
            close(host(d), want, 2e-2)


def test_callback_plan_on_several_streams(rng):
    """One cuFFT plan with a load callback (complex128, 4096 points: cuFFT with LTO callbacks)
    used on three streams. Its device parameter block is written on the first (queued behind a
    long product there), read unchanged on the second, rewritten for a new window on the third:
    each execution waits for the previous one, so none reads the block early or sees it change
    under it."""
    n, rows = 4096, 32
    xs = [rng.standard_normal((rows, n)) + 1j * rng.standard_normal((rows, n)) for _ in range(3)]
    w1, w2 = 0.5 + rng.random(n), 2.0 + rng.random(n)
    x_d = [dev(x, torch.complex128) for x in xs]
    w1_d, w2_d = dev(w1, torch.float64), dev(w2, torch.float64)
    with ff.FFT(x_d[0], axes=-1) as probe:
        probe.plan(prolog={"multiply": w1_d}, epilog={"scale": 0.25})
        if "callbacks=lto" not in probe.describe():
            pytest.skip(f"this shape does not run with cuFFT callbacks here: {probe.describe()}")
    big = torch.randn((6144, 6144), device="cuda")
    streams = [torch.cuda.Stream() for _ in range(3)]
    torch.cuda.synchronize()
    with torch.cuda.stream(streams[0]):
        busy = big @ big  # keeps stream 0 busy: its parameter write lands late
    y0 = ff.fft(x_d[0], prolog={"multiply": w1_d}, epilog={"scale": 0.25}, stream=streams[0])
    y1 = ff.fft(x_d[1], prolog={"multiply": w1_d}, epilog={"scale": 0.25}, stream=streams[1])
    y2 = ff.fft(x_d[2], prolog={"multiply": w2_d}, epilog={"scale": 0.25}, stream=streams[2])
    torch.cuda.synchronize()
    del busy
    for y, x, w in ((y0, xs[0], w1), (y1, xs[1], w1), (y2, xs[2], w2)):
        close(y.cpu().numpy(), np.fft.fft(x * w) * 0.25, 1e-10)
