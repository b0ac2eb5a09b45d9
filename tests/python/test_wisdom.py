"""fusemath.wisdom: autotune results saved by one process are used by another."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fusemath
import fusemath.fft


def test_save_load_in_a_new_process(tmp_path):
    path = tmp_path / "fm.wisdom"
    rng = np.random.default_rng(3)
    a = rng.standard_normal((300, 200), np.float32)
    b = rng.standard_normal((200, 100), np.float32)
    mm = fusemath.Matmul(a, b)
    mm.plan(epilogue="relu")
    mm.autotune(iterations=1)
    tuned = mm.describe()
    assert fusemath.wisdom.size() >= 1
    fusemath.wisdom.save(path)
    text = path.read_text()
    assert text.startswith("fusemath-wisdom 3\n") and "matmul " in text
    # A fresh process: the stateless call plans the tuned choice without tuning.
    code = textwrap.dedent(f"""
        import numpy as np, fusemath
        fusemath.wisdom.load({str(path)!r})
        assert fusemath.wisdom.size() >= 1
        rng = np.random.default_rng(3)
        a = rng.standard_normal((300, 200), np.float32)
        b = rng.standard_normal((200, 100), np.float32)
        mm = fusemath.Matmul(a, b); mm.plan(epilogue="relu")
        d = mm.execute()
        assert np.allclose(d, np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)
        print(mm.describe())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == tuned


def test_loaded_choice_is_used(tmp_path):
    """Edit a saved entry to a choice the heuristic would not make (16-row panels): the
    next plan of that problem must use it."""
    a = np.ones((300, 200), np.float32)
    b = np.ones((200, 100), np.float32)
    mm = fusemath.Matmul(a, b)
    mm.plan(epilogue="gelu")
    assert "panel=16x" not in mm.describe()
    path = tmp_path / "w"
    for _ in range(8):  # a default that wins records nothing (wisdom keeps tuned choices only): again
        fusemath.wisdom.forget()
        fusemath.clear_cache()
        mm = fusemath.Matmul(a, b)
        mm.plan(epilogue="gelu")
        mm.autotune(iterations=1)
        fusemath.wisdom.save(path)
        lines = path.read_text().splitlines()
        if any(line.startswith("matmul ") and "300x100x200" in line for line in lines):
            break
    edited = [lines[0]]
    for line in lines[1:]:  # other lines (FFTW's blob) stay byte for byte: their length is recorded
        if line.startswith("matmul ") and "epilogue=gelu" in line and "300x100x200" in line:
            words = line.split()
            words[2:6] = ["16", "1", "0", "0"]  # panel_rows, cpu_strategy=tiles, gpu_algo, gpu_passes
            line = " ".join(words)
        edited.append(line)
    assert any("matmul " in line and " 16 1 0 0 " in line for line in edited), lines
    path.write_text("\n".join(edited) + "\n")
    fusemath.wisdom.load(path)
    fusemath.clear_cache()
    mm2 = fusemath.Matmul(a, b)
    mm2.plan(epilogue="gelu")
    assert "panel=16x" in mm2.describe(), mm2.describe()
    d = mm2.execute()
    assert np.allclose(d, 200 * 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (200 + 0.044715 * 200**3))), rtol=1e-5)


def test_load_errors(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        fusemath.wisdom.load(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_text("not wisdom\n")
    with pytest.raises(ValueError, match="not a fusemath wisdom file"):
        fusemath.wisdom.load(bad)
    broken = tmp_path / "broken"
    broken.write_text("fusemath-wisdom 3\nmatmul zz\n")
    n = fusemath.wisdom.size()
    with pytest.raises(ValueError, match="line 2 is malformed"):
        fusemath.wisdom.load(broken)
    assert fusemath.wisdom.size() == n  # nothing merged
    for fields in ("-5 0 0 0", "0 9 0 0", "0 0 64 0", "0 0 0 -4"):  # values no caller could ask for
        edited = tmp_path / "edited"
        edited.write_text(f"fusemath-wisdom 3\nmatmul 0123456789abcdef 0 0 0 0 # ok\nmatmul 00000000000000aa {fields}\n")
        with pytest.raises(ValueError, match=r"line 3: panel_rows .* expected >= 0, 0\.\.3, 0\.\.63 and 0\.\.2"):
            fusemath.wisdom.load(edited)
        assert fusemath.wisdom.size() == n  # all or nothing
    for fields, why in (("0", "line 2: cpu_path 0; expected 1"), ("4", "line 2: cpu_path 4"), ("1 1", "line 2 is malformed"),
                        ("", "line 2 is malformed")):  # the fft row's own check of its tunable
        edited = tmp_path / "edited_fft"
        edited.write_text(f"fusemath-wisdom 3\nfft 00000000000000aa {fields}\nfft 0123456789abcdef 2 # ok\n")
        with pytest.raises(ValueError, match=why):
            fusemath.wisdom.load(edited)
        assert fusemath.wisdom.size() == n
    later = tmp_path / "later"  # a later format's magic line, not this one's with a suffix
    later.write_text("fusemath-wisdom 17\nmatmul 0123456789abcdef 0 0 0 0 # ok\n")
    with pytest.raises(ValueError, match="not a fusemath wisdom file"):
        fusemath.wisdom.load(later)
    # fields that do not fit an int: refused, not wrapped into range (4294967312 would read as 16)
    for fields in ("4294967312 1 0 0", "16 4294967297 0 0", "99999999999999999999 0 0 0", "16 0 0", "16 0 0 0 7"):
        wrapped = tmp_path / "wrapped"
        wrapped.write_text(f"fusemath-wisdom 3\nmatmul 00000000000000aa {fields}\n")
        with pytest.raises(ValueError, match="line 2 is malformed"):
            fusemath.wisdom.load(wrapped)
        assert fusemath.wisdom.size() == n
    with pytest.raises(ValueError, match="cannot write"):
        fusemath.wisdom.save(tmp_path / "no" / "such" / "dir" / "w")
    with pytest.raises(TypeError):
        fusemath.wisdom.save(3)
    with pytest.raises(ValueError, match="path is empty"):
        fusemath.wisdom.save("")


def test_fftw_wisdom_travels_in_the_same_file(tmp_path):
    """FFTW's measured plans are saved beside the matmul results and load in a new process;
    a damaged or truncated blob is refused with a message naming it."""
    import fusemath.fft as ff

    x = np.ones((64, 96), np.complex64)
    with ff.FFT(x, axes=(1,)) as plan:
        plan.plan(effort="measure")
        plan.execute()
    path = tmp_path / "w"
    fusemath.wisdom.save(path)
    text = path.read_text()
    assert "blob fftw " in text and "fftw_wisdom" in text and "fftwf_wisdom" in text
    code = textwrap.dedent(f"""
        import numpy as np, fusemath, fusemath.fft as ff
        fusemath.wisdom.load({str(path)!r})
        x = np.arange(96, dtype=np.complex64)[None, :].repeat(64, 0)
        with ff.FFT(x, axes=(1,)) as p:
            p.plan(effort="measure")
            assert np.allclose(p.execute(), np.fft.fft(x, axis=1), atol=1e-3)
    """)
    subprocess.run([sys.executable, "-c", code], check=True)
    head, _, rest = text.partition("blob fftw ")
    size, _, blob = rest.partition("\n")
    bad = tmp_path / "bad"
    bad.write_text(head + "blob fftw " + size + "\n" + "(not fftw wisdom" + blob[len("(not fftw wisdom"):])
    with pytest.raises(ValueError, match="FFTW rejected"):
        fusemath.wisdom.load(bad)
    cut = tmp_path / "cut"
    cut.write_text(head + "blob fftw " + size + "\n" + blob[: int(size) // 2])
    with pytest.raises(ValueError, match="truncated"):
        fusemath.wisdom.load(cut)


def test_fft_timed_choices_travel_in_the_wisdom_file(tmp_path):
    """An FFT plan timed at effort="measure" (FFTW's plan against the library's path) is
    remembered; the saved wisdom makes a fresh process take the same way without timing
    ("wisdom" in describe() instead of "timed")."""
    path = tmp_path / "fft.wisdom"
    code = textwrap.dedent("""
        import sys, numpy as np, fusemath.fft as ff, fusemath
        x = np.random.default_rng(0).standard_normal((150, 776)).astype(np.complex64)
        f = ff.FFT(x, axes=(1,)); f.plan(effort="measure")
        d = f.describe()
        assert np.allclose(f.execute(), np.fft.fft(x), rtol=1e-4, atol=1e-3)
        if sys.argv[1] == "save":
            fusemath.wisdom.save(sys.argv[2])
        print(d)
    """)
    first = subprocess.run([sys.executable, "-c", code, "save", str(path)], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert ",timed" in first, first
    text = path.read_text()  # the choice is an entry of the file: "fft <key> <cpu_path> # describe()"
    assert any(line.startswith("fft ") and line.split()[2] in ("1", "2", "3") and "150x[776]" in line
               for line in text.splitlines()), text
    assert "timed choices" not in text, text
    load = code.replace("f = ff.FFT", "fusemath.wisdom.load(sys.argv[2]); f = ff.FFT")
    second = subprocess.run([sys.executable, "-c", load, "load", str(path)], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert ",wisdom" in second and ",timed" not in second, second
    # the same way as the timed plan (FFTW's batch plan, or chunks through the scratch)
    assert first.split("path=")[1].split(",")[0] == second.split("path=")[1].split(",")[0]


def test_remembered_split_of_a_real_transform_skips_the_timing(tmp_path):
    """An r2c over two axes with a chain times FFTW's N-D plan against the split; a wisdom file
    that says "split" makes a later process plan the split straight away ("(wisdom)"), with the
    right answer."""
    path = tmp_path / "real.wisdom"
    code = textwrap.dedent("""
        import sys, numpy as np, fusemath.fft as ff, fusemath
        rng = np.random.default_rng(1)
        u, f = rng.random((96, 80)), rng.random((96, 41))
        if sys.argv[1] == "load":
            fusemath.wisdom.load(sys.argv[2])
        p = ff.FFT(u, axes=(0, 1), kind="r2c"); p.plan(epilog={"multiply": f}, effort="measure")
        assert np.allclose(p.execute(), np.fft.rfft2(u) * f, rtol=1e-10, atol=1e-9)
        if sys.argv[1] == "save":
            fusemath.wisdom.save(sys.argv[2])
        print(p.describe())
    """)
    first = subprocess.run([sys.executable, "-c", code, "save", str(path)], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert "timed" in first, first
    lines = path.read_text().split("\n")
    # the whole transform's entry (its steps, timed as the split's candidates, have their own)
    top = [i for i, line in enumerate(lines) if line.startswith("fft ") and
           (" # fft split into" in line or "x[96x80]" in line)]
    assert len(top) == 1, lines
    words = lines[top[0]].split(" ")
    words[2] = "2"  # cpu_path = chunks: as if the split had won
    lines[top[0]] = " ".join(words)
    path.write_text("\n".join(lines))
    second = subprocess.run([sys.executable, "-c", code, "load", str(path)], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert second.startswith("fft split into") and second.endswith("(wisdom)"), second


def test_a_malformed_fft_choice_merges_nothing(tmp_path):
    """A bad fft entry (a cpu_path no caller could ask for) fails the load naming it and leaves
    the process as it was: no choice remembered (the next plan is timed) and none of FFTW's
    wisdom from the file merged."""
    good = tmp_path / "good.wisdom"
    code = textwrap.dedent("""
        import sys, numpy as np, fusemath.fft as ff, fusemath
        x = np.zeros((150, 776), np.complex64)
        f = ff.FFT(x, axes=(1,)); f.plan(effort="measure")
        fusemath.wisdom.save(sys.argv[1])
    """)
    subprocess.run([sys.executable, "-c", code, str(good)], check=True)
    bad = tmp_path / "bad.wisdom"
    bad.write_text(good.read_text() + "fft 00000000000000ab 7 # edited\n")
    probe = textwrap.dedent("""
        import sys, numpy as np, fusemath.fft as ff, fusemath
        if sys.argv[1] != "-":
            try:
                fusemath.wisdom.load(sys.argv[1])
                raise SystemExit("the load did not fail")
            except ValueError as exc:
                assert "cpu_path 7; expected 1 (direct), 2 (chunks) or 3 (inplace)" in str(exc), exc
        fusemath.wisdom.save(sys.argv[2])
        x = np.zeros((150, 776), np.complex64)
        f = ff.FFT(x, axes=(1,)); f.plan(effort="measure")
        print(f.describe())
    """)
    after = tmp_path / "after.wisdom"
    fresh = tmp_path / "fresh.wisdom"
    d = subprocess.run([sys.executable, "-c", probe, str(bad), str(after)], capture_output=True, text=True,
                       check=True).stdout
    assert ",timed" in d, d
    subprocess.run([sys.executable, "-c", probe, "-", str(fresh)], check=True)
    assert after.read_text() == fresh.read_text()  # nothing of FFTW's wisdom came in either


def test_files_of_version_1_load_and_apply_nothing(tmp_path):
    """A file written before problems carried their settings ("fusemath-wisdom 1": matmul lines of
    4 values, the CPU FFT's choices inside the fftw blob) loads without error: its entries could
    never match a problem now and are not applied (the next plan is the planner's own), while
    FFTW's wisdom in its blob still loads."""
    fresh = tmp_path / "fresh.wisdom"
    fusemath.wisdom.save(fresh)
    head, _, rest = fresh.read_text().partition("blob fftw ")
    size, _, blob = rest.partition("\n")
    fftw_part = blob[: int(size)] + "\n#fusemath timed choices\nchoice 1 00000000000000ab 1\n"
    old = tmp_path / "old.wisdom"
    old.write_text("fusemath-wisdom 1\nmatmul 0123456789abcdef 16 1 0 0 # fusemath matmul cpu/openblas ...\n"
                   f"blob fftw {len(fftw_part)}\n{fftw_part}\n")
    n = fusemath.wisdom.size()
    fusemath.wisdom.load(old)
    assert fusemath.wisdom.size() == n
    v2 = tmp_path / "v2.wisdom"  # keyed before problems carried execution='best''s fields: likewise
    v2.write_text("fusemath-wisdom 2\nmatmul 0123456789abcdef 16 1 0 0 # fusemath matmul cpu/openblas ...\n")
    fusemath.wisdom.load(v2)
    assert fusemath.wisdom.size() == n
    fusemath.wisdom.save(tmp_path / "again.wisdom")  # and saved again, it is a file of this version
    assert (tmp_path / "again.wisdom").read_text().startswith("fusemath-wisdom 3\n")
    broken = tmp_path / "broken.wisdom"  # still a file to read: a line that is no entry is an error
    broken.write_text("fusemath-wisdom 1\nmatmul zz\n")
    with pytest.raises(ValueError, match="line 2 is malformed"):
        fusemath.wisdom.load(broken)


def test_forget(tmp_path):
    """wisdom.forget() drops the autotune results and the FFT's remembered choices: after a
    load and a forget, the loaded FFT choice is timed again and no matmul result is held."""
    a = np.ones((300, 200), np.float32)
    b = np.ones((200, 100), np.float32)
    mm = fusemath.Matmul(a, b)
    mm.plan(epilogue="relu")
    mm.autotune(iterations=1)
    x = np.zeros((150, 776), np.complex64)
    f = fusemath.fft.FFT(x, axes=(1,))
    f.plan(effort="measure")
    path = tmp_path / "w"
    fusemath.wisdom.save(path)
    code = textwrap.dedent("""
        import sys, numpy as np, fusemath, fusemath.fft as ff
        fusemath.wisdom.load(sys.argv[1])
        assert fusemath.wisdom.size() >= 1
        fusemath.wisdom.forget()
        assert fusemath.wisdom.size() == 0
        f = ff.FFT(np.zeros((150, 776), np.complex64), axes=(1,)); f.plan(effort="measure")
        print(f.describe())
    """)
    d = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True).stdout
    assert ",timed" in d and ",wisdom" not in d, d


def test_save_writes_through_symlinks_and_refuses_other_files(tmp_path):
    """A save replaces the file by renaming a finished temporary over it: through a symbolic
    link it must write the link's target (and leave the link), and a FIFO, device or directory
    at the path is refused rather than replaced (saving to /dev/null once replaced the device
    node with a regular file)."""
    import os
    import stat

    target = tmp_path / "real.wisdom"
    link = tmp_path / "link.wisdom"
    os.symlink(target, link)
    fusemath.wisdom.save(str(target))
    before = target.read_text()
    fusemath.wisdom.save(str(link))
    assert os.path.islink(link) and os.readlink(link) == str(target)
    assert target.read_text().splitlines()[0] == before.splitlines()[0] == "fusemath-wisdom 3"
    fusemath.wisdom.load(str(link))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        fusemath.wisdom.save(str(fifo))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(ValueError, match="not a regular file"):
        fusemath.wisdom.save(str(tmp_path))
    dangling = tmp_path / "dangling"
    os.symlink(tmp_path / "missing" / "x.wisdom", dangling)  # into a directory that does not exist
    with pytest.raises(ValueError, match="cannot write"):
        fusemath.wisdom.save(str(dangling))
    later = tmp_path / "later"
    os.symlink("later.wisdom", later)  # relative, to a file not written yet: created there
    fusemath.wisdom.save(str(later))
    assert os.path.islink(later) and (tmp_path / "later.wisdom").read_text().startswith("fusemath-wisdom 3")
    os.chmod(target, 0o600)  # a replaced file keeps its permissions
    fusemath.wisdom.save(str(link))
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "later", "later.wisdom", "link.wisdom", "pipe",
                                                          "real.wisdom"]


def test_concurrent_saves_to_one_path(tmp_path):
    """Each save has a temporary of its own: threads saving to one path at once never fail and
    the file is always a complete wisdom file."""
    import threading

    path = str(tmp_path / "same.wisdom")
    errors = []

    def saver():
        for _ in range(50):
            try:
                fusemath.wisdom.save(path)
            except Exception as exc:  # noqa: BLE001 - collected and reported below
                errors.append(exc)

    threads = [threading.Thread(target=saver) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    fusemath.wisdom.load(path)
    assert [p.name for p in tmp_path.iterdir()] == ["same.wisdom"]  # no temporaries left behind


def test_long_comment_lines_load(tmp_path):
    """A comment line longer than any buffer is one line, not several (its rest was once
    parsed as a malformed entry)."""
    path = tmp_path / "w"
    fusemath.wisdom.save(str(path))
    head, rest = path.read_text().split("\n", 1)
    path.write_text(head + "\n# " + "x" * 2000 + "\n" + rest)
    fusemath.wisdom.load(str(path))
    path.write_text(head + "\n# " + "y" * 2000)  # and at the end of the file, without a newline
    fusemath.wisdom.load(str(path))
