"""One loader for `package.module:function`, the user's datasets, factories and families."""

from __future__ import annotations

import pytest

from automl.errors import DataError, SpecError
from automl.plugins import import_plugin


def test_a_module_in_the_current_folder_is_importable(tmp_path, monkeypatch):
    (tmp_path / "mine_here.py").write_text("def build():\n    return 42\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p != str(tmp_path)])
    assert import_plugin("mine_here:build", "model factory")() == 42


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("no_colon", "must look like 'package.module:function'"),
        ("pkg.mod:a.b", "must look like 'package.module:function'"),
        ("no_such_module_anywhere:f", "dataset plugin 'no_such_module_anywhere:f' cannot be"),
        ("automl.plugins:nope", "cannot be imported"),
    ],
)
def test_a_bad_reference_is_the_callers_error_naming_what_it_is(reference, message):
    with pytest.raises(DataError, match=message):
        import_plugin(reference, "dataset plugin", DataError)
    with pytest.raises(SpecError):  # the default error
        import_plugin(reference, "family")
