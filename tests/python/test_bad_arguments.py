"""Bad arguments a review found taking a wrong path (thirteenth session): each now raises an
exception of the documented kind that names the argument, where before it hung, answered with a
bare Python error that named nothing, or silently computed something else."""
import os

import numpy as np
import pytest

import fakelib
import fusemath
import fusemath.fft as ff


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_wisdom_load_refuses_what_is_not_a_regular_file():
    with pytest.raises(ValueError, match="not a regular file"):  # it read /dev/zero forever
        fusemath.wisdom.load("/dev/zero")


@pytest.mark.parametrize("call,name", [
    (lambda x: ff.FFT(x, kind=["c2c"]), "kind"),
    (lambda x: ff.FFT(x).plan(effort=["measure"]), "effort"),
    (lambda x: ff.FFT(x).plan(gpu_prolog={}), "gpu_prolog"),
])
def test_fft_planner_names_unhashable_string_arguments(call, name):
    with pytest.raises(ValueError, match=name):  # was TypeError: unhashable type
        call(np.ones(8, complex))


def test_execution_with_a_non_ascii_digit():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="execution"):  # was int()'s own ValueError
        fusemath.matmul(a, a, execution="cuda:\u00b2")


def test_bools_are_not_lengths_or_streams():
    x = np.arange(8.0) + 0j
    with pytest.raises(TypeError, match="n must be an int, not bool"):  # was a 1-point transform
        ff.fft(x, n=True)
    with pytest.raises(TypeError, match=r"s\[0\] must be an int, not bool"):
        ff.fft2(np.ones((4, 4), complex), s=[True, 4])
    f = ff.FFT(x)
    f.plan(effort="estimate")
    with pytest.raises(TypeError, match="stream"):
        f.execute(stream=True)


@pytest.mark.parametrize("kw", [{"alpha": "x"}, {"alpha": [1.0]}, {"beta": "x"}])
def test_matmul_scalars_are_checked_when_given(kw):
    a = np.ones((4, 3)); b = np.ones((3, 5)); c = np.ones((4, 5))
    name = next(iter(kw))
    with pytest.raises(TypeError, match=f"fusemath.Matmul: {name} must be a number"):
        fusemath.Matmul(a, b, c, **kw)  # was accepted here and refused at plan() under a C name


def test_messages_name_the_argument():
    with pytest.raises(TypeError, match="d .the sample spacing. must be a real number"):  # was "d is nan"
        ff.fftfreq(8, None)
    with pytest.raises(TypeError, match="set_num_threads: n must be an int"):
        fusemath.set_num_threads(np.array([2]))
    with pytest.raises(TypeError, match="iterations must be an int"):
        fusemath.Matmul(np.ones((4, 3)), np.ones((3, 5))).autotune(np.array([2]))
    a, b = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    with pytest.raises(fusemath.ShapeError, match=r"bias of shape \(2, 4, 5\) has more dimensions than the output"):
        fusemath.matmul(a, b, bias=np.zeros((2, 4, 5), np.float32))  # was "axis 0 has 4, expected 1 or 1"


@pytest.mark.parametrize("scales", ["x", 5, [1, 2]])
def test_quantization_scales_of_the_wrong_kind_on_library_tensors(scales):
    fakelib.install()
    a, b = fakelib.tensor(np.ones((4, 4), np.float32)), fakelib.tensor(np.ones((4, 4), np.float32))
    with pytest.raises(TypeError, match="quantization_scales must be a dict"):  # was silently ignored
        fusemath.matmul(a, b, quantization_scales=scales)
