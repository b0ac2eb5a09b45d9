"""Run dieharder (-g 200: raw 32-bit words on stdin) on fusemath's portable stream; used by
test_random_stats.py::test_dieharder and runnable by hand:
    .venv/bin/python tests/python/dieharder_feed.py [seed] [dieharder args...]   (default: -a)
Prints dieharder's report and a last line "summary: PASSED p WEAK w FAILED f seconds s"."""
import re
import subprocess
import sys
import time

import fusemath.random as fr

CHUNK = 1 << 22  # words per write (16 MiB)


def run(seed=20261202, args=("-a",), echo=None):
    """dieharder's stdout, and the counts {"PASSED", "WEAK", "FAILED"} and the seconds it took;
    echo: a file each line of dieharder's report is written to as it comes (a partial run shows)."""
    t0 = time.monotonic()
    p = subprocess.Popen(["dieharder", "-g", "200", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    g = fr.default_rng(seed)
    import threading

    out = []

    def read():
        for line in p.stdout:
            out.append(line)
            if echo is not None:
                echo.write(line.decode(errors="replace"))
                echo.flush()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        while p.poll() is None:
            p.stdin.write(g.random_raw(CHUNK).tobytes())
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        p.stdin.close()
    except BrokenPipeError:
        pass
    p.wait()
    reader.join()
    text = b"".join(out).decode(errors="replace")
    counts = {k: len(re.findall(r"\|\s*" + k + r"\s*$", text, re.M)) for k in ("PASSED", "WEAK", "FAILED")}
    return text, counts, time.monotonic() - t0


if __name__ == "__main__":
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 20261202
    text, c, secs = run(seed, tuple(sys.argv[2:]) or ("-a",), echo=sys.stdout)
    print(f"summary: PASSED {c['PASSED']} WEAK {c['WEAK']} FAILED {c['FAILED']} seconds {secs:.0f}")
