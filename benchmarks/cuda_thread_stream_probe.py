"""cuda_thread_stream_probe.py: stateless GPU matmuls (PyTorch tensors) from several Python threads
on each kind of stream: one torch stream per thread, the legacy default stream (handle 0) shared,
the same from threads started one after another ("serial"), cudaStreamPerThread (handle 2), and
with no cuBLASLt workspace (FUSEMATH_CUDA_WORKSPACE_MB=0). Each case runs in a fresh process and
prints the errors raised and the results that differ from torch's own product.

Found (thirteenth session, H200): on the legacy stream every thread but the first failed with
CUBLAS_STATUS_EXECUTION_FAILED (the thread had no current CUDA context; fm_cuda_use_device now calls
cudaSetDevice once per thread). Run on the GPU machine: .venv/bin/python benchmarks/cuda_thread_stream_probe.py
"""
import os, subprocess, sys

CASE = r'''
import ctypes, threading, sys, os
import torch, fusemath
nthreads, dtype, mode = int(sys.argv[1]), getattr(torch, sys.argv[2]), sys.argv[3]
rt = ctypes.CDLL("libcudart.so.13")
ids = []
def sid(h):
    v = ctypes.c_ulonglong(0); r = rt.cudaStreamGetId(ctypes.c_void_p(h), ctypes.byref(v)); return (r, v.value)
a = [torch.randn(256, 128, device="cuda", dtype=dtype) for _ in range(nthreads)]
b = torch.randn(128, 256, device="cuda", dtype=dtype); bb = torch.randn(256, device="cuda", dtype=dtype)
outs = [[torch.empty(256, 256, device="cuda", dtype=dtype) for _ in range(5)] for _ in range(nthreads)]
streams = [torch.cuda.Stream() for _ in range(nthreads)]
torch.cuda.synchronize(); errs = []
def w(t):
    try:
        if mode == "pts": ids.append(sid(2))
        st = {"pts": 2, "legacy": 0, "torch": streams[t].cuda_stream, "serial": 0}[mode]
        for d in outs[t]:
            fusemath.matmul(a[t], b, bias=bb, epilogue="relu", out=d, stream=st)
    except Exception as e:
        errs.append((t, repr(e)[:120], rt.cudaGetLastError()))
if mode == "serial":
    for t in range(nthreads):
        th = threading.Thread(target=w, args=(t,)); th.start(); th.join()
else:
    ths = [threading.Thread(target=w, args=(t,)) for t in range(nthreads)]
    [x.start() for x in ths]; [x.join() for x in ths]
torch.cuda.synchronize()
bad = sum(int((d.float() - (a[t].float() @ b.float() + bb.float()).relu()).abs().max().item() > 0.05 * 30)
          for t in range(nthreads) for d in outs[t])
print(f"{sys.argv[1:]} ws_mb={os.environ.get('FUSEMATH_CUDA_WORKSPACE_MB','-')}: n_err={len(errs)} wrong={bad} ids={ids} {errs[:1]}", flush=True)
'''
cases = [("4", "bfloat16", "torch", None), ("4", "bfloat16", "legacy", None), ("4", "bfloat16", "serial", None),
         ("4", "bfloat16", "pts", None), ("4", "bfloat16", "legacy", "0"), ("2", "float16", "torch", None),
         ("1", "bfloat16", "legacy", None)]
for n, dt, mode, ws in cases:
    env = dict(os.environ)
    if ws is not None:
        env["FUSEMATH_CUDA_WORKSPACE_MB"] = ws
    r = subprocess.run([sys.executable, "-c", CASE, n, dt, mode], env=env, capture_output=True, text=True, timeout=60)
    print((r.stdout.strip() or r.stderr.strip()[-400:]), flush=True)
