"""Labels given as class names: mapped to class indices, the names kept as ``class_names``."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_wine

from automl.errors import DataError
from automl.inputs.data import load_dataset


def _wine(tmp_path, names: bool = True, **extra: np.ndarray) -> str:
    """scikit-learn's wine table (13 features) as an .npz, its labels as strings if ``names``."""
    x, y = load_wine(return_X_y=True)
    labels = np.array(["barolo", "grignolino", "barbera"])[y] if names else y
    path = tmp_path / "wine.npz"
    np.savez(
        path, x_train=x[::2], y_train=labels[::2], x_test=x[1::2], y_test=labels[1::2], **extra
    )
    return str(path)


def test_string_labels_are_classes_named_in_sorted_order(tmp_path):
    data = load_dataset(_wine(tmp_path))
    by_index = load_dataset(_wine(tmp_path, names=False))
    assert data.num_classes == 3 and data.class_names == ("barbera", "barolo", "grignolino")
    assert data.y_train.dtype == np.int64
    # barolo (index 0 in scikit-learn) is class 1 here, barbera (2) class 0.
    assert np.array_equal(data.y_test, np.array([1, 2, 0])[by_index.y_test])


def test_string_labels_take_the_order_of_the_class_names_given(tmp_path):
    order = np.array(["barolo", "grignolino", "barbera", "never seen"])
    data = load_dataset(_wine(tmp_path, class_names=order))
    by_index = load_dataset(_wine(tmp_path, names=False))
    assert data.class_names == tuple(order) and data.num_classes == 4
    assert np.array_equal(data.y_test, by_index.y_test)


def test_true_and_false_labels_are_two_classes(tmp_path):
    x, y = load_wine(return_X_y=True)
    path = tmp_path / "wine.npz"
    np.savez(path, x_train=x[::2], y_train=y[::2] == 0, x_test=x[1::2], y_test=y[1::2] == 0)
    data = load_dataset(str(path))
    assert data.class_names == ("False", "True") and data.y_test.sum() == (y[1::2] == 0).sum()


def test_a_plugin_s_labels_as_python_strings_are_classes(tmp_path, monkeypatch):
    (tmp_path / "string_label_plugin.py").write_text(
        "import numpy as np\n"
        "def load():\n"
        "    x = np.arange(40, dtype='float32').reshape(20, 2)\n"
        "    y = np.array(['cat', 'dog'] * 10, dtype=object)\n"
        "    return {'x_train': x, 'y_train': y, 'x_test': x, 'y_test': y}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_dataset("string_label_plugin:load").class_names == ("cat", "dog")


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (
            lambda y: {"y_train": y.astype(str), "y_test": y},
            r"labels of .* come in different forms \(\{'y_train': 'names', 'y_test': 'indices'\}"
            r"\): give every split's labels as class names \(strings\), or all as class indices",
        ),
        (
            lambda y: {
                "y_train": y.astype(str),
                "y_test": y.astype(str),
                "class_names": np.array(["0", "1"]),
            },
            r"y_train of .* holds labels \['2'\] that class_names \['0', '1'\] does not name",
        ),
        (
            lambda y: {"y_train": y.astype(float), "y_test": y},
            r"y_train of .* holds whole numbers as float64; .* give y.astype\(int\)$",
        ),
        (
            lambda y: {"y_train": y + 0.5, "y_test": y},
            r"labels must be integer class indices 0..K-1 or class names \(strings\).*"
            r"\(regression\) is not supported",
        ),
    ],
)
def test_labels_that_are_no_classes_are_refused_with_what_to_give(tmp_path, labels, message):
    x, y = load_wine(return_X_y=True)
    path = tmp_path / "wine.npz"
    np.savez(path, x_train=x, x_test=x, **labels(y))
    with pytest.raises(DataError, match=message):
        load_dataset(str(path))


def test_labels_saved_as_python_objects_are_refused_with_how_to_save_names(tmp_path):
    x, y = load_wine(return_X_y=True)
    path = tmp_path / "wine.npz"
    np.savez(path, x_train=x, y_train=y.astype(object), x_test=x, y_test=y)
    with pytest.raises(DataError, match=r"y_train .* Python objects; .*y.astype\(str\)"):
        load_dataset(str(path))
