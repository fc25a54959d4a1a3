from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from automl.errors import DataError
from automl.inputs import synthetic
from automl.inputs.data import describe_dataset, load_dataset


def test_digits_shapes_and_split(digits):
    assert digits.input_shape == (1, 8, 8)
    assert digits.num_classes == 10
    total = len(digits.x_train) + len(digits.x_val) + len(digits.x_test)
    assert total == 1797
    assert digits.x_train.dtype == np.float32 and digits.y_train.dtype == np.int64
    # stratified: every class in every split
    for y in (digits.y_train, digits.y_val, digits.y_test):
        assert set(np.unique(y)) == set(range(10))


def test_split_is_deterministic_by_seed(digits):
    again = load_dataset("digits", seed=0)
    other = load_dataset("digits", seed=1)
    assert np.array_equal(again.x_test, digits.x_test)
    assert again.fingerprint == digits.fingerprint
    assert not np.array_equal(other.x_test, digits.x_test)
    assert other.fingerprint != digits.fingerprint


def test_calibration_comes_from_train_not_test(digits):
    train_rows = {row.tobytes() for row in digits.x_train}
    test_rows = {row.tobytes() for row in digits.x_test}
    calib_rows = {row.tobytes() for row in digits.x_calib}
    assert len(digits.x_calib) == 128
    assert calib_rows <= train_rows
    assert not (calib_rows - train_rows) and not (calib_rows & (test_rows - train_rows))


def test_standardised_with_train_statistics(digits):
    assert abs(float(digits.x_train.mean())) < 0.05
    assert digits.preprocessing["standardize"]["std"] > 0


def _arrays(n_train=60, n_test=20, features=(5,), classes=3):
    rng = np.random.default_rng(0)
    return {
        "x_train": rng.normal(size=(n_train, *features)).astype(np.float32),
        "y_train": np.arange(n_train) % classes,
        "x_test": rng.normal(size=(n_test, *features)).astype(np.float32),
        "y_test": np.arange(n_test) % classes,
    }


def test_npz_without_val_gets_a_val_split(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, **_arrays())
    data = load_dataset(str(path), seed=0)
    assert data.input_shape == (5,) and data.num_classes == 3
    assert len(data.x_val) > 0 and len(data.x_train) + len(data.x_val) == 60


def test_npz_with_val_keeps_it(tmp_path):
    arrays = _arrays()
    arrays["x_val"], arrays["y_val"] = arrays["x_test"][:6], arrays["y_test"][:6]
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    assert len(load_dataset(str(path)).x_val) == 6


def test_plugin_dataset(tmp_path, monkeypatch):
    module = tmp_path / "my_data_plugin.py"
    module.write_text(
        "import numpy as np\n"
        "def load():\n"
        "    x = np.ones((30, 4), dtype='float32') * np.arange(30)[:, None]\n"
        "    y = np.arange(30) % 2\n"
        "    return {'x_train': x, 'y_train': y, 'x_test': x[:10], 'y_test': y[:10],\n"
        "            'class_names': ['even', 'odd']}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = load_dataset("my_data_plugin:load")
    assert data.input_shape == (4,) and data.num_classes == 2
    assert data.class_names == ("even", "odd")
    sys.modules.pop("my_data_plugin", None)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda a: a.pop("y_test"), "lacks arrays \\['y_test'\\]"),
        (lambda a: a.update(y_train=a["y_train"][:-1]), "one label per sample: 60 samples"),
        (lambda a: a.update(x_test=np.zeros((20, 6), np.float32)), "sample shape \\(6,\\)"),
        (lambda a: a.update(y_test=a["y_test"] - 5), r"y_test .* holds labels -5..-3"),
        (lambda a: a.update(y_train=a["y_train"] * 10**9), r"labels 0..2000000000.*at most"),
        (lambda a: a.update(y_train=a["y_train"] * 0.5), "y_train .*float64.*not supported"),
        (lambda a: a.update(y_train=a["y_train"] > 0), r"different forms .*booleans"),
        (
            lambda a: a.update(X_train=a.pop("x_train")),
            r"lacks arrays \['x_train'\] and has \['X_train'\], which are not read",
        ),
        (lambda a: a.update(y_train=np.zeros_like(a["y_train"])), r"holds one class \(\[0\]\)"),
        (lambda a: a.update(y_test=a["y_test"] + 1), r"y_test .* holds classes \[3\] that y_train"),
        (
            lambda a: a.update(y_train=a["y_train"] + 1, y_test=a["y_test"] + 1),
            r"labels of .* run to 3 but no sample has class\(es\) \[0\] \(labels from 1 look "
            r"1-based: subtract 1\).*give class_names naming every class",
        ),
        (lambda a: a["x_train"].__setitem__((3, 1), np.nan), r"1 values .*NaN.*index \(3, 1\)"),
        (lambda a: a["x_test"].__setitem__((0, 0), np.inf), "x_test .*NaN or infinite"),
        (lambda a: a.update(x_train=a["x_train"].astype(str)), "dtype <U.*integer or float"),
        (
            lambda a: a.update(class_names=np.array(["a", "b"])),
            r"class_names of .* must name each of the 3 classes \(labels 0..2\) once, got "
            r"shape \(2,\)",
        ),
        (lambda a: a.update(class_names=np.array(["a", "b", "a"])), "repeat a name"),
    ],
)
def test_bad_npz_names_the_problem(tmp_path, mutate, message):
    arrays = _arrays()
    mutate(arrays)
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataError, match=message):
        load_dataset(str(path))


def test_class_names_may_name_classes_above_every_label(tmp_path):
    arrays = _arrays()  # labels 0..2
    np.savez(tmp_path / "d.npz", **arrays, class_names=np.array(["a", "b", "c", "never seen"]))
    data = load_dataset(str(tmp_path / "d.npz"))
    assert data.num_classes == 4 and data.class_names[-1] == "never seen"
    np.savez(tmp_path / "e.npz", **arrays, class_names=np.array(["a", "b", "c"]))
    assert load_dataset(str(tmp_path / "e.npz")).fingerprint != data.fingerprint  # other logits


def test_bad_sources(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_dataset(str(tmp_path / "missing.npz"))
    with pytest.raises(DataError, match="unknown dataset 'mnist'"):
        load_dataset("mnist")
    with pytest.raises(DataError, match="cannot be imported"):
        load_dataset("no_such_module_xyz:load")
    with pytest.raises(DataError, match="dataset plugin 'json:loads' failed: TypeError"):
        load_dataset("json:loads")  # raises when called without arguments
    for bad in ("ragged", "one_class"):
        (tmp_path / f"{bad}_plugin.py").write_text(
            "import numpy as np\n"
            "def load():\n"
            "    return {'x_train': [[1.0, 2.0], [3.0]], 'y_train': [0, 1],\n"
            "            'x_test': [[1.0, 2.0]], 'y_test': [0]}\n"
            if bad == "ragged"
            else "import numpy as np\n"
            "def load():\n"
            "    x = np.ones((20, 3), np.float32)\n"
            "    return {'x_train': x, 'y_train': np.zeros(20, int), 'x_test': x, 'y_test':"
            " np.zeros(20, int)}\n"
        )
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(DataError, match="returned values that are not arrays"):
            load_dataset("ragged_plugin:load")
        with pytest.raises(DataError, match="holds one class"):
            load_dataset("one_class_plugin:load")
    finally:
        sys.path.remove(str(tmp_path))
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(DataError, match=r"not a readable \.npz"):
        load_dataset(str(tmp_path / "junk.npz"))


def test_digits_records_class_names_and_raw_input(digits):
    assert digits.class_names == tuple(str(i) for i in range(10))
    assert digits.raw_input == {"dtype": "float32", "min": 0.0, "max": 16.0}


def test_class_names_default_to_the_label_indices(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, **_arrays())
    assert load_dataset(str(path)).class_names == ("0", "1", "2")
    np.savez(path, **_arrays(), class_names=np.array(["cat", "dog", "emu"]))
    assert load_dataset(str(path)).class_names == ("cat", "dog", "emu")
    one_based = {**_arrays(), "class_names": np.array(["none", "cat", "dog", "emu"])}
    one_based.update(y_train=one_based["y_train"] + 1, y_test=one_based["y_test"] + 1)
    np.savez(path, **one_based)  # the names keep the gap: class 0 has no sample
    assert load_dataset(str(path)).num_classes == 4


def test_raw_inputs_are_standardised_by_the_float32_formula(tmp_path):
    arrays = _arrays()
    arrays["x_train"] = np.random.default_rng(1).integers(3, 250, size=(60, 5), dtype=np.uint8)
    arrays["x_test"] = np.random.default_rng(2).integers(0, 256, size=(20, 5), dtype=np.uint8)
    arrays["x_val"], arrays["y_val"] = arrays["x_train"][:10], arrays["y_train"][:10]
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    data = load_dataset(str(path))
    description = json.loads(json.dumps(describe_dataset(data)))  # as a sidecar holds it
    assert description["raw_input"] == {
        "dtype": "uint8",
        "min": int(arrays["x_train"].min()),
        "max": int(arrays["x_train"].max()),
    }
    assert description["preprocessing"]["dtype"] == "float32"
    standardize = description["preprocessing"]["standardize"]
    assert standardize["mode"] == "per_feature"  # the default of (N, F) features
    mean, std = np.float32(standardize["mean"]), np.float32(standardize["std"])
    assert mean.shape == std.shape == (5,)
    expected = (arrays["x_test"].astype(np.float32) - mean) / std
    assert expected.dtype == np.float32
    np.testing.assert_array_equal(data.x_test, expected)
    assert description["class_names"] == ["0", "1", "2"]


def _tokens(tmp_path, **changes):
    arrays = {**synthetic.tokens(n_train=40, n_test=20, length=8, vocab_size=16), **changes}
    path = tmp_path / "tokens.npz"
    np.savez(path, **arrays)
    return str(path)


def test_token_ids_are_kept_as_int64_and_described_as_not_standardised(tmp_path):
    data = load_dataset(_tokens(tmp_path))
    raw = synthetic.tokens(n_train=40, n_test=20, length=8, vocab_size=16)
    assert data.is_tokens and data.vocab_size == 16 and data.input_dtype == "int64"
    assert data.input_shape == (8,) and data.x_calib.dtype == np.int64
    for split in (data.x_train, data.x_val, data.x_test):
        assert split.dtype == np.int64 and split.min() >= 0 and split.max() < 16
    np.testing.assert_array_equal(data.x_test, raw["x_test"])  # as given, not standardised
    description = json.loads(json.dumps(describe_dataset(data)))
    assert description["preprocessing"]["dtype"] == "int64"
    assert description["preprocessing"]["tokens"] == {"vocab_size": 16}
    assert "not standardised" in description["preprocessing"]["formula"]
    assert "standardize" not in description["preprocessing"]


def test_integers_without_a_vocabulary_are_features(tmp_path):
    arrays = synthetic.tokens(n_train=40, n_test=20, length=8, vocab_size=16)
    del arrays["vocab_size"]
    path = tmp_path / "ids.npz"
    np.savez(path, **arrays)
    data = load_dataset(str(path))
    assert not data.is_tokens and data.x_train.dtype == np.float32
    assert "standardize" in data.preprocessing


def test_the_vocabulary_is_part_of_the_fingerprint(tmp_path):
    first = load_dataset(_tokens(tmp_path)).fingerprint
    assert load_dataset(_tokens(tmp_path, vocab_size=17)).fingerprint != first


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vocab_size": np.array([16, 16])}, r"vocab_size .* must be one integer"),
        ({"vocab_size": 1.5}, r"vocab_size .* must be one integer"),
        ({"vocab_size": 1}, r"vocab_size .* must be in 2\.\.1000000"),
        (
            {"vocab_size": 10},
            r"token ids 1\.\.15, outside the vocabulary 0\.\.9: raise vocab_size to 16",
        ),
        ({"x_test": np.zeros((20, 8), np.float32)}, r"x_test .* is float32 .* give integer ids"),
        (
            {"x_train": np.zeros((40, 2, 4), np.int64), "x_test": np.zeros((20, 2, 4), np.int64)},
            r"shape \(40, 2, 4\), but vocab_size marks token ids",
        ),
    ],
)
def test_bad_token_data_names_the_problem(tmp_path, changes, message):
    with pytest.raises(DataError, match=message):
        load_dataset(_tokens(tmp_path, **changes))


@pytest.mark.parametrize(
    ("mode", "shape"),
    [("auto", (3, 1, 1)), ("per_channel", (3, 1, 1)), ("per_feature", (3, 4, 4)),
     ("scalar", ()), ("none", ())],
)  # fmt: skip
def test_images_are_standardised_per_channel_from_train_only(tmp_path, mode, shape):
    rng = np.random.default_rng(0)
    scales = np.array([1.0, 100.0, 10_000.0])[None, :, None, None]
    arrays = {
        "x_train": (rng.random((60, 3, 4, 4)) * scales).astype(np.float32),
        "y_train": np.arange(60) % 2,
        "x_test": (rng.random((20, 3, 4, 4)) * scales * 1000).astype(np.float32),  # unlike train
        "y_test": np.arange(20) % 2,
    }
    np.savez(tmp_path / "images.npz", **arrays)
    data = load_dataset(str(tmp_path / "images.npz"), standardize=mode)
    standardize = data.preprocessing["standardize"]
    assert standardize["mode"] == ("per_channel" if mode == "auto" else mode)
    mean = np.float32(standardize["mean"])
    assert mean.shape == shape
    if mode in ("auto", "per_channel"):
        train = np.concatenate([data.x_train, data.x_val])
        np.testing.assert_allclose(train.mean(axis=(0, 2, 3)), 0, atol=0.2)  # each channel
        assert np.all(np.abs(data.x_test).mean(axis=(0, 2, 3)) > 100)  # test's own scale kept
    if mode == "none":
        np.testing.assert_array_equal(data.x_test, arrays["x_test"])


def test_a_constant_feature_keeps_a_std_of_one(tmp_path):
    x = np.ones((40, 3), np.float32)
    x[:, 0] = np.arange(40)
    np.savez(tmp_path / "t.npz", x_train=x, y_train=np.arange(40) % 2, x_test=x[:6],
             y_test=np.arange(6) % 2)  # fmt: skip
    data = load_dataset(str(tmp_path / "t.npz"))
    assert data.preprocessing["standardize"]["std"][1:] == [1.0, 1.0]
    assert np.isfinite(data.x_train).all()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rows", "cols", "key", "message"),
    [
        (6_000_000, 50, "x_train", "x_train of 'bomb.npz' has 6000000 samples of 50 features"),
        (4_000_000, 100, "x_train", "the arrays of 'bomb.npz' take 1600 MB once decompressed"),
        (6_000_000, 50, "junk", "dataset 'bomb.npz' lacks arrays ['x_train']"),  # never read
    ],
)
def test_a_compressed_npz_is_refused_by_its_headers_before_it_is_decompressed(
    tmp_path, monkeypatch, rows, cols, key, message
):
    import subprocess
    import sys

    from crafted import crafted_npz

    crafted_npz(tmp_path / "bomb.npz", rows, cols, key, level=1)  # 3 times faster than level 6
    assert (tmp_path / "bomb.npz").stat().st_size < 8_000_000  # 200 times smaller than its array
    monkeypatch.setenv("AUTOML_DATA_MAX_MB", "1000")
    # The peak is reset first: a forked child starts with its parent's (pytest's, with torch).
    code = (
        "open('/proc/self/clear_refs', 'w').write('5')\nfrom automl.inputs.data import load_dataset\n"
        "from automl.errors import DataError\ntry:\n    load_dataset('bomb.npz')\n"
        "except DataError as e:\n    print(e)\nstatus = open('/proc/self/status').read()\n"
        "print(status.split('VmHWM:')[1].split()[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    said, peak_kb = done.stdout.strip().splitlines()
    assert said.startswith(message), said
    assert int(peak_kb) < 200_000, done.stdout  # the array alone is 1.2 GB or more
