"""A bounded schemathesis run: no server errors and no response that breaks the schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from automl.search.spec import parse_spec
from automl.service.create import create_study

pytest_plugins = ["api_fixtures"]

pytest.importorskip("schemathesis")
# On PostgreSQL, the store of a fleet, whose column types (integers, string lengths) refuse more
# of what the fuzzer sends than SQLite does; the other REST modules run on both.
pytestmark = pytest.mark.parametrize("api_storage_url", ["postgresql"], indirect=True)


def test_schemathesis_finds_no_server_errors_or_schema_violations(
    api_server, api_token, synthetic_trial, tmp_path
):

    spec = {"name": "example", "search_space": "digits-mlp", "n_trials": 5}
    study = create_study(parse_spec(spec), api_server.storage)
    study.add_trials([synthetic_trial(i, 0.9 + i / 100, 1.0 + i) for i in range(3)])
    report = tmp_path / "report.json"
    cli = Path(sys.executable).parent / "schemathesis"
    subprocess.run(
        [
            str(cli), "run", f"{api_server.url}/openapi.json", "-H", f"Authorization: Bearer {api_token}",
            "--checks", "all", "--max-examples", "10", "--seed", "1",
            "--report", "json", "--report-json-path", str(report),
        ],
        check=False, capture_output=True, timeout=120,
    )  # fmt: skip
    result = json.loads(report.read_text())
    codes = {f["code"]: f["count"] for f in result["failures"]}
    assert result["test_cases"]["generated"] > 200
    assert result["operations"]["tested"] == result["operations"]["total"]
    assert not {c for c in codes if c.startswith("ST1")}, result["failures"]
    assert not result["errors"]
