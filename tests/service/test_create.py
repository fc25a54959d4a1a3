"""Creating and resuming a study: what is refused before anything runs, and what is queued first."""

from __future__ import annotations

import select
import subprocess
import sys

import numpy as np
import optuna
import pytest

from automl.errors import DataError, SpecError
from automl.fleet.study_loop import run_study_loop
from automl.search.spec import parse_spec
from automl.service.create import check_name, create_study, named_for_inputs
from automl.service.fingerprints import DATA_ATTR
from automl.storage.factory import open_artifact_store


def _spec(**values):
    base = {"name": "t", "search_space": "digits-mlp", "n_trials": 3, "seed": 0}
    return parse_spec({**base, **values})


def test_resume_with_another_spec_is_refused(env):
    _, storage, _ = env
    create_study(_spec(), storage)
    create_study(_spec(n_trials=10), storage)  # a new budget is fine
    with pytest.raises(SpecError, match=r"different spec \(fields \['seed'\] differ\)"):
        create_study(_spec(seed=3), storage)


def test_bits_the_target_cannot_run_are_refused_before_running(env, tmp_path):
    space = tmp_path / "twobit.yaml"
    space.write_text(
        "name: x\nparams:\n  arch.family: {type: fixed, value: mlp}\n  bits: {type: categorical, choices: [32, 2]}\n"
    )
    with pytest.raises(SpecError, match="cannot run"):
        create_study(_spec(search_space=str(space)), env[1])


# A racer imports first, then creates each study named on its stdin: the two creates of a round
# start together, not seconds of imports apart.
RACER = """
import sys
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.settings import Settings
from automl.storage.factory import open_storage

settings = Settings(storage=sys.argv[1])
for name in sys.stdin:
    spec = parse_spec({"name": name.strip(), "search_space": "digits-mlp"})
    create_study(spec, open_storage(sys.argv[1], settings), check_data=False)
    print("ok", flush=True)
"""


def _answer(racer: subprocess.Popen) -> str:
    ready, _, _ = select.select([racer.stdout], [], [], 120)
    return racer.stdout.readline().strip() if ready else "(no answer in 120 s)"


@pytest.mark.e2e  # processes of their own
def test_racing_creates_of_one_new_study_both_get_it(tmp_path):
    """Two processes starting one new study at once: neither crashes, both get the study."""
    url = f"sqlite:///{tmp_path}/race.db"
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    racers = [
        subprocess.Popen([sys.executable, "-c", RACER, url], text=True, **pipes) for _ in range(2)
    ]
    for round_ in range(4):
        for racer in racers:
            racer.stdin.write(f"race-{round_}\n")
            racer.stdin.flush()
        answers = [_answer(racer) for racer in racers]
        if answers != ["ok", "ok"]:
            pytest.fail(
                f"round {round_}: {answers}, {[r.communicate(timeout=120) for r in racers]}"
            )
    outputs = [racer.communicate(timeout=120) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0], outputs
    names = [s.study_name for s in optuna.get_all_study_summaries(url)]
    assert sorted(names) == [f"race-{i}" for i in range(4)]


def test_a_resume_on_changed_data_is_refused_and_the_fingerprint_is_kept(env, tmp_path):
    settings, storage, _ = env
    data = tmp_path / "d.npz"
    x = np.random.default_rng(0).normal(size=(60, 16)).astype(np.float32)  # int4 needs 16
    y = np.arange(60) % 3
    np.savez(data, x_train=x, y_train=y, x_test=x[:20], y_test=y[:20])
    spec = _spec(dataset=str(data))
    study = create_study(spec, storage)
    fingerprint = study.user_attrs[DATA_ATTR]
    assert create_study(spec, storage).user_attrs[DATA_ATTR] == fingerprint  # same data: resumes
    np.savez(data, x_train=x + 1, y_train=y, x_test=x[:20], y_test=y[:20])
    with pytest.raises(DataError, match=r"has changed since the study began.*--name t-v2"):
        create_study(spec, storage)
    with pytest.raises(DataError, match="has changed"):  # a worker refuses it as well
        run_study_loop("t", storage, artifact_store=open_artifact_store(settings),
                       settings=settings)  # fmt: skip
    assert optuna.load_study(study_name="t", storage=storage).user_attrs[DATA_ATTR] == fingerprint
    assert not optuna.load_study(study_name="t", storage=storage).trials


def test_a_study_of_an_earlier_automl_says_why_its_data_fingerprint_moved(env):
    from automl.records import SPEC_ATTR

    _, storage, _ = env
    spec = _spec()
    study = create_study(spec, storage)
    old = {k: v for k, v in study.user_attrs[SPEC_ATTR].items() if k not in ("standardize",)}
    study.set_user_attr(SPEC_ATTR, old)  # as a study created before `standardize` existed
    study.set_user_attr(DATA_ATTR, "0123456789abcdef")  # scalar statistics' fingerprint
    with pytest.raises(DataError, match="created by an earlier automl, which standardised"):
        create_study(spec, storage)


def test_a_max_rate_study_first_tries_the_settings_of_the_highest_bound(env):
    # Queued first, so that later trials meet a high rate to beat; the sampler draws the rest.
    _, storage, _ = env
    study = create_study(_spec(search_space="digits-serving"), storage, check_data=False)
    fixed_rate = _spec(name="at-500", search_space="digits-serving",
                       serving={"rate_rps": 500, "slo_p99_ms": 10})  # fmt: skip
    other = create_study(fixed_rate, storage, check_data=False)

    [first] = study.get_trials(states=[optuna.trial.TrialState.WAITING])
    assert first.system_attrs["fixed_params"] == {
        "serving.max_batch": 32, "serving.instances": 2, "serving.max_queue_delay_ms": 1,
    }  # fmt: skip
    assert other.get_trials() == []  # at a fixed rate, the lowest p99 needs no capacity


def test_a_taken_name_is_refused_before_the_data_is_read(env, tmp_path):
    _, storage, _ = env
    create_study(_spec(), storage)
    elsewhere = _spec(dataset=str(tmp_path / "not-here.npz"))  # reading it would fail
    with pytest.raises(SpecError, match=r"fields \['dataset'\] differ"):
        check_name(elsewhere, storage)
    with pytest.raises(SpecError, match=r"fields \['dataset'\] differ"):
        create_study(elsewhere, storage)
    check_name(_spec(n_trials=10), storage)  # a new budget resumes it


def test_default_names_tell_datasets_and_models_apart():
    def name(**values):
        return named_for_inputs(parse_spec(values)).name

    assert name(search_space="digits-mlp") == "digits-mlp-cpu"  # the Quickstart's, on digits
    assert name(search_space="digits-mlp", dataset="/d/wine.npz") == "digits-mlp-wine-cpu"
    assert (
        name(search_space="s/my space.yml", dataset="pkg.tables:wine") == "my-space-tables.wine-cpu"
    )
    build = {"factory": "pkg.mymodel:build", "weights": "w.pt"}
    other = {"factory": "yours:build", "weights": "w.pt"}
    assert name(model=build, target="a100") == "mymodel.build-a100"
    assert name(model=other, dataset="x.npz") == "yours.build-x-cpu"
    assert name(model={"weights": "/m/resnet.v2.onnx"}) == "resnet.v2-cpu"
    assert name(name="mine", dataset="x.npz") == "mine"  # a given name is kept
