"""The CLI's consoles: tables fit COLUMNS piped and the terminal's width on a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from automl.candidate import Candidate
from automl.records import BUILT, constraint_attrs
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.read import pareto_front
from automl.settings import Settings
from automl.storage.factory import open_storage

pytestmark = pytest.mark.e2e  # the automl command, forked or on a terminal of its own

NAME = "digits-mlp-cpu"
_DISTRIBUTIONS = {
    "arch.width": IntDistribution(16, 128, step=16),
    "arch.depth": IntDistribution(1, 3),
    "pruning_ratio": FloatDistribution(0.0, 0.6, step=0.1),
    "bits": CategoricalDistribution([32, 16, 8, 4]),
    "batch_size": CategoricalDistribution([1, 8, 32, 128]),
}
# The Quickstart's front (README.md), with the long numbers that 80 columns used to cut.
_FRONT = [  # width, depth, ratio, bits, batch, widths built, accuracy, ms per sample, MACs
    (80, 3, 0.4, 8, 32, [48, 48, 48], 0.9722, 0.003712, 8458),
    (128, 1, 0.0, 4, 128, [128], 0.963, 0.00169, 9738),
    (128, 1, 0.0, 16, 128, [128], 0.9583, 0.001408, 9738),
    (16, 2, 0.1, 4, 32, [16, 16], 0.9537, 0.0003251, 3075701),
]


def _trial(width, depth, ratio, bits, batch, widths, accuracy, ms, macs):
    params = {"arch.width": width, "arch.depth": depth, "pruning_ratio": ratio, "bits": bits,
              "batch_size": batch}  # fmt: skip
    candidate = Candidate.from_dict({"arch": {"family": "mlp", "width": width, "depth": depth},
                                     "pruning_ratio": ratio, "bits": bits, "batch_size": batch})  # fmt: skip
    p99 = ms * batch * 2.5
    attrs = {
        "candidate": candidate.as_dict(),
        "history": {BUILT: {"method": candidate.method, "widths": widths}},
        "accuracy": accuracy, "test_accuracy": accuracy - 0.003, "latency_per_sample_ms": ms,
        "latency_p50_ms": ms * batch, "latency_p99_ms": p99, "throughput_sps": 1000 / ms,
        "size_mb": 0.0180, "macs": float(macs), "params": 1e4,
        "params_unpruned": 2e4 if widths[0] < width else 1e4,
        "latency": {"ci_rel": 0.01},
    }  # fmt: skip
    return optuna.trial.create_trial(
        params=params, distributions=_DISTRIBUTIONS, values=[accuracy, ms], user_attrs=attrs,
        system_attrs=constraint_attrs([p99 - 5]),
    )  # fmt: skip


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> dict:
    """A study holding the Quickstart's front, and an environment whose automl reads it."""
    root = tmp_path_factory.mktemp("quickstart")
    url = f"sqlite:///{root / 'automl.db'}"
    study = create_study(parse_spec({"name": NAME, "search_space": "digits-mlp"}),
                         open_storage(url, Settings()))  # fmt: skip
    for row in _FRONT:
        study.add_trial(_trial(*row))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOML_", "COLUMNS"))}
    labels = [record.label for record in pareto_front(NAME, open_storage(url, Settings()))]
    return {"root": root, "env": {**env, "AUTOML_STORAGE": url}, "labels": labels}


def _check_whole(printed: str, quickstart: dict) -> None:
    """Every line within 80 columns, no number cut, and each row's trial number and candidate
    whole (read back from its wrapped lines)."""
    lines = printed.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in printed
    rows: list[list[str]] = []
    for line in lines:
        if line.startswith("│"):
            trial, candidate = (cell.strip() for cell in line.split("│")[1:3])
            if trial:
                rows.append([trial])
            rows[-1].append(candidate)
    assert [row[0] for row in rows] == ["0", "1", "2", "3"]
    assert [" ".join(" ".join(row[1:]).split()) for row in rows] == quickstart["labels"]


def test_piped_output_fits_columns(quickstart, zygote) -> None:
    env = {**quickstart["env"], "COLUMNS": "80"}
    done = zygote.run(["study", "pareto", NAME], cwd=quickstart["root"], env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    _check_whole(done.stdout, quickstart)
    left_out = next(line for line in done.stdout.splitlines() if line.startswith("left out"))
    assert {"samples/s", "MB", "MACs"} <= set(left_out.split(": ")[1].strip().split(", "))
    assert "ms/sample" in done.stdout  # an objective stays


def test_piped_output_without_columns_is_wide_enough_for_every_column(quickstart, zygote):
    done = zygote.run(["study", "pareto", NAME], cwd=quickstart["root"], env=quickstart["env"],
                      timeout=60)  # fmt: skip
    assert "samples/s" in done.stdout and "left out" not in done.stdout


def test_a_terminal_80_columns_wide_shows_whole_rows(quickstart) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 80, 0, 0))
    automl = Path(sys.executable).with_name("automl")
    process = subprocess.Popen(
        [automl, "study", "pareto", NAME], cwd=quickstart["root"], env=quickstart["env"],
        stdin=slave, stdout=slave, stderr=slave, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    printed = b""
    while select.select([master], [], [], 60)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        printed += chunk
    os.close(master)
    assert process.wait(timeout=60) == 0
    text = printed.decode().replace("\r\n", "\n")
    plain = _strip_ansi(text)
    _check_whole(plain, quickstart)


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
