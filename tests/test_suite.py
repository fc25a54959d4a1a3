"""The test suite's own machinery: what ``make test`` relies on to run in two processes."""

from __future__ import annotations

import re
import subprocess
import sys


def test_an_xdist_group_runs_whole_in_one_worker(tmp_path) -> None:
    """``--dist loadgroup`` keeps a marked module on one worker, where its module fixtures run
    once (tests/trials/test_families.py relies on it)."""
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n"
        "pytestmark = pytest.mark.xdist_group('together')\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_it(i):\n    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", "-o", "addopts=", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    workers = set(re.findall(r"\[(gw\d)\] .* PASSED", done.stdout))
    assert done.returncode == 0 and len(workers) == 1, done.stdout
