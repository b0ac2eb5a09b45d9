"""Run by test_plan_cache.py::test_plan_log_goes_through_logging in a process with FUSEMATH_LOG=plan
(the variable is read when fusemath creates its context): the plan lines as records of the "fusemath"
logger, captured with caplog. Not collected in the main run (the name is not test_*.py)."""
import logging
import os
import sys
import threading

import numpy as np

import fusemath
import fusemath.fft as ff

assert "plan" in os.environ.get("FUSEMATH_LOG", ""), "run with FUSEMATH_LOG=plan"


def _chosen(caplog):
    return [r for r in caplog.records if r.name == "fusemath" and r.getMessage().endswith("(chosen)")]


def test_records_of_the_fusemath_logger(caplog, capfd):
    caplog.set_level(logging.INFO, logger="fusemath")
    a, b = np.ones((7, 5), np.float32), np.ones((5, 3), np.float32)
    np.testing.assert_array_equal(fusemath.matmul(a, b), a @ b)
    recs = _chosen(caplog)
    assert recs and recs[0].levelno == logging.INFO and recs[0].getMessage().startswith("matmul cpu/"), caplog.text
    assert "fusemath[plan]" not in capfd.readouterr().err  # not on stderr as well


def test_records_from_planning_threads(caplog):
    """Planning runs with the GIL released; the sink takes it on whatever thread plans."""
    caplog.set_level(logging.INFO, logger="fusemath")
    x = np.ones(4096, np.complex128)
    threads = [threading.Thread(target=ff.fft, args=(x[:n],)) for n in range(3001, 3009)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.getMessage() for r in _chosen(caplog)}) >= 8, caplog.text


def test_a_failing_log_filter_does_not_fail_planning(caplog, monkeypatch):
    """The logger's exception goes to sys.unraisablehook; the product is planned and right."""
    caplog.set_level(logging.INFO, logger="fusemath")
    logger, reported = logging.getLogger("fusemath"), []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))

    def boom(record):
        raise RuntimeError("filter failed")

    logger.addFilter(boom)
    try:
        a = np.arange(12.0).reshape(3, 4)
        np.testing.assert_allclose(fusemath.matmul(a, a.T), a @ a.T)  # planned anew: a new shape
    finally:
        logger.removeFilter(boom)
    assert reported and all(isinstance(e, RuntimeError) for e in reported), reported
