"""pytest configuration for the fusemath Python tests.

GPU tests carry @pytest.mark.gpu and are skipped when fusemath.cuda_device_count() == 0.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # for mmref.py (shared reference helpers)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped when fusemath.cuda_device_count() == 0")


def pytest_collection_modifyitems(config, items):
    import fusemath

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
