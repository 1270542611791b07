"""Runs reference_api_script.py (a script written against the reference
TorchTPU's documented API) in a fresh process in each eager mode; the script
compares every result with CPU."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"])
def test_reference_api_script(mode):
    root = os.path.dirname(os.path.dirname(HERE))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, os.path.join(HERE, "reference_api_script.py"), mode],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    lines = done.stdout.split("\n")
    assert "done" in lines and sum(line.startswith("ok ") for line in lines) == 13
