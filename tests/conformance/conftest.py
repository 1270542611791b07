"""OpInfo conformance: options and the expected-failures data.

    pytest tests/conformance            # the fixed CI slice (a few minutes)
    pytest tests/conformance --full     # every OpInfo, every dtype (see README.md)
"""
import os

os.environ.setdefault("TORCH_TPU_DISK_CACHE", "0")  # before torch autoloads torch_tpu
os.environ["TORCH_TPU_CPU_FALLBACK"] = "0"          # a missing op must fail, not fall back

import pytest  # noqa: E402

EXPECTED_FAILURES = os.path.join(os.path.dirname(__file__), "expected_failures.txt")


def pytest_addoption(parser):
    group = parser.getgroup("conformance")
    group.addoption("--full", action="store_true",
                    help="run every OpInfo and dtype, not the CI slice")
    group.addoption("--opinfo", action="append", default=[], metavar="GLOB",
                    help="only OpInfos whose id matches GLOB (repeatable)")


@pytest.fixture(scope="session")
def expected_failures():
    from torch_tpu.tools import conformance
    return conformance.read_expected(EXPECTED_FAILURES)  # the same path test_opinfo.py names
