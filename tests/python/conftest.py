"""pytest configuration for the fusemath Python tests.

GPU tests carry @pytest.mark.gpu and are skipped when fusemath.cuda_device_count() == 0.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # for mmref.py (shared reference helpers)


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run the tests marked slow")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped when fusemath.cuda_device_count() == 0")
    config.addinivalue_line("markers", "slow: minutes of CPU (10^7-sample statistics, dieharder); run with --run-slow")


def pytest_collection_modifyitems(config, items):
    import fusemath

    if not config.getoption("--run-slow"):
        skip_slow = pytest.mark.skip(reason="slow: pass --run-slow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip_slow)

    if fusemath.cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA device (fusemath.cuda_device_count() == 0)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    import numpy as np

    import zlib

    # deterministic per test (str hash() is randomised per process), different across tests
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


@pytest.fixture
def restore_threads():
    import fusemath

    n = fusemath.get_num_threads()
    yield n
    fusemath.set_num_threads(0)
    if fusemath.get_num_threads() != n:
        fusemath.set_num_threads(n)
