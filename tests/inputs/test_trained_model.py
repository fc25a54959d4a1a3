"""Loading a user's trained model: the factory, the weights, and each refusal."""

from __future__ import annotations

import pytest
import torch

from automl.errors import SpecError
from automl.inputs.trained_model import open_trained, save_module


@pytest.fixture
def weights(tmp_path):
    from trained_factories import digits_cnn

    path = tmp_path / "w.pt"
    torch.save(digits_cnn().state_dict(), path)
    return path


def test_build_loads_the_saved_weights(weights):
    model = open_trained("trained_factories:digits_cnn", weights).build()
    saved = torch.load(weights, weights_only=True)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
    assert not model.training


def test_the_digest_follows_the_file(weights):
    first = open_trained("trained_factories:digits_cnn", weights).digest
    torch.save({k: v + 1 for k, v in torch.load(weights, weights_only=True).items()}, weights)
    assert open_trained("trained_factories:digits_cnn", weights).digest != first


def test_a_missing_weights_file_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"weights file .*nope.pt' does not exist"):
        open_trained("trained_factories:digits_cnn", tmp_path / "nope.pt")


def test_a_corrupt_weights_file_is_refused(tmp_path):
    path = tmp_path / "w.pt"
    path.write_bytes(b"not a torch file at all")
    with pytest.raises(SpecError, match=r"is not a state dict saved with torch.save"):
        open_trained("trained_factories:digits_cnn", path).build()


def test_a_pickled_module_is_refused_by_weights_only(tmp_path):
    from trained_factories import digits_cnn

    path = tmp_path / "w.pt"
    torch.save(digits_cnn(), path)  # the whole module: unpickling it would run code
    with pytest.raises(SpecError, match=r"a whole pickled model \(torch.save\(model\)\)") as e:
        open_trained("trained_factories:digits_cnn", path).build()
    assert "\x1b[" not in str(e.value) and "\n" not in str(e.value)  # torch's text, one line


def test_weights_of_other_shapes_are_refused_naming_them(weights):
    trained = open_trained("trained_factories:narrower_cnn", weights)
    with pytest.raises(SpecError, match=r"do not fit .*shape: features\.0\.weight \(48, 1, 3, 3\)"):
        trained.build()


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("trained_factories:nope", "cannot be imported"),
        ("no_such_module_here:build", "cannot be imported"),
        ("trained_factories:not_a_module", "returned str, not a torch nn.Module"),
    ],
)
def test_a_bad_factory_is_refused(weights, factory, message):
    with pytest.raises(SpecError, match=message):
        open_trained(factory, weights).build()


def test_an_in_memory_model_is_saved_as_its_class_and_weights(tmp_path):
    from trained_factories import DigitsCNN

    model = DigitsCNN()
    saved = save_module(model, tmp_path)
    assert saved["factory"] == "trained_factories:DigitsCNN"
    assert save_module(model, tmp_path) == saved  # once per content
    rebuilt = open_trained(saved["factory"], saved["weights"]).build()
    assert all(torch.equal(rebuilt.state_dict()[k], v) for k, v in model.state_dict().items())


def test_an_in_memory_model_whose_class_needs_arguments_is_refused(tmp_path):
    class Local(torch.nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.classifier = torch.nn.Linear(width, 2)

    with pytest.raises(SpecError, match="cannot be imported by name; pass model="):
        save_module(Local(3), tmp_path)
    with pytest.raises(SpecError, match="needs constructor arguments"):
        save_module(torch.nn.Linear(3, 2), tmp_path)
    sequential = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with pytest.raises(SpecError, match="built with no arguments is another model"):
        save_module(sequential, tmp_path)  # Sequential() builds, empty
    assert list(tmp_path.iterdir()) == []


def test_weights_changed_after_they_were_opened_are_refused(weights):
    trained = open_trained("trained_factories:digits_cnn", weights)
    torch.save({k: v + 1 for k, v in torch.load(weights, weights_only=True).items()}, weights)
    with pytest.raises(SpecError, match="has changed since it was checked"):
        trained.build()


def test_an_empty_weights_file_is_refused_when_opened(tmp_path):
    (tmp_path / "empty.pt").touch()
    with pytest.raises(SpecError, match=r"'.*empty.pt' is empty \(0 bytes\): save it with torch"):
        open_trained("trained_factories:digits_cnn", tmp_path / "empty.pt")


def test_an_error_of_torch_without_a_message_is_refused_naming_its_kind(tmp_path):
    path = tmp_path / "w.pt"
    path.write_bytes(b"\x80\x02")  # a pickle cut short: torch raises EOFError('')
    with pytest.raises(SpecError, match=r"is not a state dict .* Torch said: EOFError$"):
        open_trained("trained_factories:digits_cnn", path).build()


def test_a_state_dict_in_torchs_legacy_format_loads(tmp_path):
    from trained_factories import digits_cnn

    model = digits_cnn()
    torch.save(model.state_dict(), tmp_path / "w.pt", _use_new_zipfile_serialization=False)
    rebuilt = open_trained("trained_factories:digits_cnn", tmp_path / "w.pt").build()
    assert all(torch.equal(rebuilt.state_dict()[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ((48, 4800), r"the headers of its record 'archive/data/0' disagree on its size"),
        ((1 << 31, 1 << 31), r"its headers give its records \d+ bytes, more than the whole file"),
    ],
)
def test_an_archive_whose_sizes_lie_is_refused_before_torch_reads_it(tmp_path, sizes, message):
    from crafted_weights import lying_sizes

    lying_sizes(tmp_path / "w.pt", *sizes)
    with pytest.raises(SpecError, match=r"is not an archive that torch.save writes: " + message):
        open_trained("torch.nn:Identity", tmp_path / "w.pt").build()


def test_a_compressed_record_is_refused_naming_it(tmp_path):
    from crafted_weights import deflated_weights

    deflated_weights(tmp_path / "w.pt", 1 << 20)
    with pytest.raises(SpecError, match=r"its record 'archive/data/0' is compressed \(torch.save"):
        open_trained("torch.nn:Identity", tmp_path / "w.pt").build()


@pytest.mark.parametrize("zip64", [False, True])
def test_an_archive_whose_end_record_names_another_directory_is_refused(tmp_path, zip64):
    from crafted_weights import two_directories

    # torch would inflate the directory the end record names; zipfile reads the other one.
    two_directories(tmp_path / "w.pt", zip64=zip64)  # torch.save ends its archives in zip64
    with pytest.raises(SpecError, match=r"its central directory is not where its end records"):
        open_trained("torch.nn:Identity", tmp_path / "w.pt").build()


def test_a_record_whose_local_header_is_not_where_the_directory_says_is_refused(tmp_path):
    from crafted_weights import misplaced_local_header

    misplaced_local_header(tmp_path / "w.pt")
    said = r"its record 'archive/data/0' has no local header where its central directory says"
    with pytest.raises(SpecError, match=said):
        open_trained("torch.nn:Identity", tmp_path / "w.pt").build()


# Well under the 512 MiB that the bombs below inflate to: Python and torch take 300 MB.
_PEAK_KB = 400_000


@pytest.mark.slow
def test_crafted_weights_are_refused_before_they_take_memory(tmp_path):
    import subprocess
    import sys

    from crafted_weights import deflated_weights, lying_legacy, two_directories

    deflated_weights(tmp_path / "bomb.pt")  # 512 MiB of zeros, deflated
    two_directories(tmp_path / "hidden.pt", 1 << 29)  # the same, behind a harmless directory
    lying_legacy(tmp_path / "legacy.pt")  # claims 4 GiB
    assert (tmp_path / "bomb.pt").stat().st_size < 4_000_000
    # The peak is reset before each: a forked child starts with its parent's (pytest's).
    code = (
        "from automl.errors import SpecError\nfrom automl.inputs.trained_model import open_trained\n"
        "for name in ('bomb.pt', 'hidden.pt', 'legacy.pt'):\n"
        "    open('/proc/self/clear_refs', 'w').write('5')\n"
        "    try:\n        open_trained('torch.nn:Identity', name).build()\n"
        "    except SpecError as e:\n        print(e)\n    status = open('/proc/self/status').read()\n"
        "    print(status.split('VmHWM:')[1].split()[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    bomb, bomb_kb, hidden, hidden_kb, legacy, legacy_kb = done.stdout.strip().splitlines()
    assert max(int(bomb_kb), int(hidden_kb), int(legacy_kb)) < _PEAK_KB, done.stdout
    assert "its record 'archive/data/0' is compressed" in bomb, bomb
    assert "its central directory is not where its end records say" in hidden, hidden
    assert "Torch said: RuntimeError: unexpected EOF" in legacy, legacy  # read from the file
