from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path

import numpy as np
import optuna

from automl.records import BUILT, constraint_attrs
from automl.search.front_gain import predicted_gains
from automl.search.space import SEARCH_SPACES_DIR, SearchSpace, load_space
from automl.search.variants import MIN_GAIN, SAME_MODEL_AS, VARIANT_OF, VariantSampler

MODEL = ("arch.width", "arch.depth", "pruning_ratio")


def _study(trials_per_model: int, startup_trials: int = 0, seed: int = 0) -> optuna.Study:
    space = load_space("digits-mlp")
    sampler = VariantSampler(
        optuna.samplers.RandomSampler(seed=0), space, trials_per_model, startup_trials, seed
    )
    return optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)


def _objective(trial: optuna.Trial) -> tuple[float, float]:
    """Wider is more accurate and slower; a larger batch is faster per sample."""
    candidate = load_space("digits-mlp").suggest(trial)
    return candidate.arch.width / 1000, math.log10(candidate.arch.width / candidate.batch_size)


def test_variants_redeploy_a_front_model_up_to_trials_per_model():
    study = _study(trials_per_model=3)
    study.optimize(_objective, n_trials=12)
    parents = [t.user_attrs.get(VARIANT_OF) for t in study.trials]
    assert any(p is not None for p in parents)
    assert max(Counter(p for p in parents if p is not None).values()) <= 2
    for trial, parent in zip(study.trials, parents, strict=True):
        if parent is not None:
            assert VARIANT_OF not in study.trials[parent].user_attrs
            parent_model = {k: study.trials[parent].params[k] for k in MODEL}
            assert {k: trial.params[k] for k in MODEL} == parent_model


def test_a_variant_takes_the_deployment_predicted_to_move_the_front_most():
    study = _study(trials_per_model=2)
    model = {"arch.width": 16, "arch.depth": 1, "pruning_ratio": 0.0, "bits": 32}
    for width, batch in [(16, 1), (16, 32), (128, 1), (128, 32)]:
        study.enqueue_trial({**model, "arch.width": width, "batch_size": batch})
    study.optimize(_objective, n_trials=5)
    variant = study.trials[4]
    # The front is both widths at batch 32; batch 128 is untried, and per-sample latency has
    # fallen with the batch for both models.
    parent = study.trials[variant.user_attrs[VARIANT_OF]]
    assert variant.params["arch.width"] == parent.params["arch.width"]
    assert variant.params["batch_size"] == 128


def test_workers_that_choose_at_once_do_not_run_the_same_variant():
    storage = optuna.storages.InMemoryStorage()
    space = load_space("digits-mlp")
    first = optuna.create_study(
        storage=storage,
        directions=["maximize", "minimize"],
        sampler=VariantSampler(optuna.samplers.RandomSampler(seed=0), space, 4, 0),
    )
    model = {"arch.width": 16, "arch.depth": 1, "pruning_ratio": 0.0, "bits": 32}
    for width, batch in [(16, 1), (16, 32), (128, 1), (128, 32)]:
        first.enqueue_trial({**model, "arch.width": width, "batch_size": batch})
    first.optimize(_objective, n_trials=4)
    second = optuna.load_study(  # another worker: its own sampler, the same storage
        study_name=first.study_name,
        storage=storage,
        sampler=VariantSampler(optuna.samplers.RandomSampler(seed=1), space, 4, 0),
    )
    a, b = first.ask(), second.ask()  # both choose before either suggests a param
    assert VARIANT_OF in first.trials[a.number].user_attrs
    first.tell(a, _objective(a))
    second.tell(b, _objective(b))
    assert a.params != b.params


def test_credit_for_untried_deployments_fades_once_deployments_show_no_effect():
    study = _study(trials_per_model=4, startup_trials=8)
    space = load_space("digits-mlp")
    study.optimize(_no_deployment_effect, n_trials=30)
    shares = []
    for n in (10, 30):
        trials = study.trials[:n]
        candidates = [
            (parent, {**parent.params, **deployment})
            for parent in trials
            if VARIANT_OF not in parent.user_attrs
            for deployment in space.deployments(space.model_params(parent.params))
        ]
        gains = predicted_gains(space, trials, [-1, 1], candidates, optimism=0.0)[0]
        assert max(gains) < MIN_GAIN  # the prediction itself never credits a deployment
        gains = np.array(predicted_gains(space, trials, [-1, 1], candidates)[0])
        shares.append((gains > MIN_GAIN).mean())
    assert shares[1] < shares[0] / 2  # its uncertainty shrinks as variants measure no change


def _no_deployment_effect(trial: optuna.Trial) -> tuple[float, float]:
    """Wider is more accurate and slower; the deployment changes nothing."""
    width = load_space("digits-mlp").suggest(trial).arch.width
    return width / 1000, math.log10(width)


def test_enqueued_trials_keep_their_params_and_variants_follow_them():
    study = _study(trials_per_model=2)
    model = {"arch.depth": 1, "pruning_ratio": 0.0, "bits": 32}
    enqueued = [
        {**model, "arch.width": 16 * (i + 1), "batch_size": (1, 8)[i % 2]} for i in range(6)
    ]
    for params in enqueued:
        study.enqueue_trial(params)

    def objective(trial):  # equally accurate, and only the batch sets the latency
        candidate = load_space("digits-mlp").suggest(trial)
        return 0.9, math.log10(100 / candidate.batch_size)

    study.optimize(objective, n_trials=7)
    assert [t.params for t in study.trials[:6]] == enqueued
    # At the untried batch 128, any model would lead. A new model gets there only where it
    # draws batch 128, so a variant at 128 is predicted to add more.
    variant = study.trials[6]
    parent = study.trials[variant.user_attrs[VARIANT_OF]]
    assert {k: variant.params[k] for k in MODEL} == {k: parent.params[k] for k in MODEL}
    assert variant.params["batch_size"] == 128


def test_one_trial_per_model_draws_every_model_anew():
    study = _study(trials_per_model=1)
    study.optimize(_objective, n_trials=4)
    assert all(VARIANT_OF not in t.user_attrs for t in study.trials)


def _deployment(trial: optuna.trial.FrozenTrial) -> tuple:
    return tuple(sorted((k, v) for k, v in trial.params.items() if k not in MODEL))


def test_variants_never_repeat_a_deployment_of_their_model():
    study = _study(trials_per_model=8)
    study.optimize(_objective, n_trials=24)
    by_model: dict[int, list[tuple]] = {}
    for trial in study.trials:
        by_model.setdefault(trial.user_attrs.get(VARIANT_OF, trial.number), []).append(
            _deployment(trial)
        )
    assert max(len(d) for d in by_model.values()) > 1
    assert all(len(set(d)) == len(d) for d in by_model.values())


def _random_study_of_mlps(tmp_path, params: str) -> tuple[SearchSpace, optuna.Study]:
    """A space of MLPs with ``params`` (YAML lines) and batch 1 or 8, and a study of it whose
    VariantSampler (4 trials per model, no startup) draws the rest at random."""
    path = tmp_path / "mlps.yaml"
    path.write_text(
        "name: mlps\nparams:\n  arch.family: {type: fixed, value: mlp}\n"
        f"{params}  batch_size: {{type: categorical, choices: [1, 8]}}\n"
    )
    space = load_space(str(path))
    sampler = VariantSampler(optuna.samplers.RandomSampler(seed=0), space, 4, 0)
    return space, optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)


def test_a_model_with_every_deployment_tried_gets_no_more_variants(tmp_path):
    space, study = _random_study_of_mlps(
        tmp_path, "  arch.width: {type: categorical, choices: [16, 32, 48]}\n"
    )

    def objective(trial):
        candidate = space.suggest(trial)
        return candidate.arch.width / 1000, math.log10(candidate.arch.width / candidate.batch_size)

    for width, batch in [(16, 1), (48, 1), (32, 8)]:  # the front: 48 at batch 1, 32 at batch 8
        study.enqueue_trial({"arch.width": width, "batch_size": batch})
    study.optimize(objective, n_trials=8)
    assert study.trials[3].user_attrs[VARIANT_OF] == 1
    models = Counter(t.user_attrs.get(VARIANT_OF, t.number) for t in study.trials)
    assert max(models.values()) == 2  # two batch sizes: the parent and one variant


def test_variants_work_with_the_stateful_gp_sampler_and_constraints():
    """GPSampler caches per search space; variants must not make its trials fail."""
    space = load_space("digits-mlp")
    sampler = VariantSampler(optuna.samplers.GPSampler(seed=0), space, 3, 0)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)

    def objective(trial):
        candidate = space.suggest(trial)
        trial.set_constraint("0", candidate.batch_size - 64.0)
        latency = candidate.arch.width * candidate.bits / candidate.batch_size
        return candidate.arch.width / 1000 - candidate.arch.depth / 100, math.log10(latency)

    study.optimize(objective, n_trials=18)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    variants = [t.number for t in study.trials if VARIANT_OF in t.user_attrs]
    assert variants
    assert variants[0] < 17  # the GP drew trials after a variant


def _startup_study(seed: int) -> optuna.Study:
    study = _study(trials_per_model=4, startup_trials=6, seed=seed)
    study.optimize(_objective, n_trials=9)
    return study


def test_startup_redeploys_each_new_model_twice_at_random_then_predicts_variants():
    study = _startup_study(seed=0)
    space = load_space("digits-mlp")
    parents = [t.user_attrs.get(VARIANT_OF) for t in study.trials]
    assert parents[:6] == [None, 0, 0, None, 3, 3]
    assert any(parent is not None for parent in parents[6:])
    for model in (0, 3):
        trials = [study.trials[n] for n in (model, model + 1, model + 2)]
        assert len({str(space.model_params(t.params)) for t in trials}) == 1
        assert len({str(t.params) for t in trials}) == 3
    assert [t.params for t in _startup_study(seed=0).trials[:6]] == [
        t.params for t in study.trials[:6]
    ]


def test_startup_variants_stay_within_trials_per_model():
    study = _study(trials_per_model=2, startup_trials=6)
    study.optimize(_objective, n_trials=6)
    assert [t.user_attrs.get(VARIANT_OF) for t in study.trials] == [None, 0, None, 2, None, 4]


def test_a_retried_trial_keeps_its_params_and_is_no_variant():
    study = _study(trials_per_model=3)
    study.optimize(_objective, n_trials=1)
    retry = {"arch.width": 128, "arch.depth": 1, "pruning_ratio": 0.0, "bits": 32}
    retry_params = {k: v for k, v in study.trials[0].params.items() if k not in retry} | retry
    study.add_trial(  # as RetryHeartbeatStaleTrialCallback queues it: params, no fixed_params
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.WAITING,
            params=retry_params,
            distributions=study.trials[0].distributions,
        )
    )
    study.optimize(_objective, n_trials=1)
    assert study.trials[1].params == retry_params
    assert VARIANT_OF not in study.trials[1].user_attrs


def test_a_study_resumed_on_an_edited_space_runs_new_models(tmp_path):
    study = _study(trials_per_model=3)
    study.optimize(_objective, n_trials=2)
    text = Path(SEARCH_SPACES_DIR / "digits-mlp.yaml").read_text()
    edited_file = tmp_path / "edited.yaml"  # no pruning: old trials have a param it lacks
    edited_file.write_text(text.replace("  pruning_ratio: {type: float", "  # {type: float"))
    edited = load_space(str(edited_file))
    study.sampler = VariantSampler(optuna.samplers.RandomSampler(seed=1), edited, 3, 0)
    study.optimize(lambda t: (0.9, float(edited.suggest(t).arch.width)), n_trials=1)
    assert study.trials[2].state == optuna.trial.TrialState.COMPLETE
    assert VARIANT_OF not in study.trials[2].user_attrs


def _accuracy_budget_study(stuck: list[int]) -> optuna.Study:
    """Narrow models (width < 64) break an accuracy budget that no deployment repairs."""
    space = load_space("digits-mlp")
    sampler = VariantSampler(optuna.samplers.RandomSampler(seed=0), space, 4, 0, stuck=stuck)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        candidate = space.suggest(trial)
        accuracy = candidate.arch.width / 1000
        for key, value in constraint_attrs([0.064 - accuracy]).items():
            trial.storage.set_trial_system_attr(trial._trial_id, key, value)
        return accuracy, math.log10(candidate.arch.width / candidate.batch_size)

    study.optimize(objective, n_trials=24)
    return study


def test_a_model_that_breaks_a_budget_no_deployment_repairs_is_never_redeployed():
    def parents(study: optuna.Study) -> tuple[set[int], set[int]]:
        broken = {t.number for t in study.trials if t.params["arch.width"] < 64}
        return broken, {
            t.user_attrs[VARIANT_OF] for t in study.trials if VARIANT_OF in t.user_attrs
        }

    broken, redeployed = parents(_accuracy_budget_study(stuck=[0]))
    assert broken and redeployed and not broken & redeployed
    broken, redeployed = parents(_accuracy_budget_study(stuck=[]))
    assert broken & redeployed  # without it, the hypervolume alone sends variants there


def test_a_variant_must_beat_what_a_new_model_is_predicted_to_add():
    study = _study(trials_per_model=6)
    model = {"arch.width": 16, "arch.depth": 1}
    for pruning, bits, batch in itertools.product((0.0, 0.1), (32, 16), (1, 32)):
        study.enqueue_trial({**model, "pruning_ratio": pruning, "bits": bits, "batch_size": batch})

    def objective(trial):  # pruning trades a little accuracy for much latency; the batch, little
        candidate = load_space("digits-mlp").suggest(trial)
        pruning, batch = candidate.pruning_ratio, candidate.batch_size
        return 0.9 - 0.2 * pruning, 1 - pruning - 0.01 * math.log2(batch)

    study.optimize(objective, n_trials=8)
    space = load_space("digits-mlp")
    candidates = [
        (parent, {**parent.params, **deployment})
        for parent in study.trials
        for deployment in space.deployments(space.model_params(parent.params))
        if {**parent.params, **deployment} not in [t.params for t in study.trials]
    ]
    drawn = [space.draw(np.random.default_rng(0)) for _ in range(32)]
    variants, new = predicted_gains(space, study.trials, [-1, 1], candidates, new_models=drawn)
    assert max(variants) > MIN_GAIN  # a variant would add to the front
    assert max(variants) < np.mean(new)  # less than a new, more pruned model is expected to
    study.optimize(objective, n_trials=1)
    assert VARIANT_OF not in study.trials[8].user_attrs


def test_two_params_that_build_one_model_count_as_one_model(tmp_path):
    space, study = _random_study_of_mlps(
        tmp_path,
        "  arch.width: {type: categorical, choices: [8, 16]}\n"
        "  pruning_ratio: {type: categorical, choices: [0.0, 0.2, 0.3]}\n",
    )

    def objective(trial):
        candidate = space.suggest(trial)
        width = 8 if candidate.pruning_ratio else candidate.arch.width  # multiples of 8 kept
        built = {"method": "fp32", "widths": [width]}
        trial.set_user_attr("candidate", candidate.as_dict())
        trial.set_user_attr("history", {BUILT: built})
        return width / 1000 + candidate.arch.width / 1e5, math.log10(width / candidate.batch_size)

    # 0 and 1 prune the same trained w16 to the same 8 channels: one model, at batch 1 and 8.
    for width, ratio, batch in [(16, 0.2, 1), (16, 0.3, 8), (8, 0.0, 1)]:
        study.enqueue_trial({"arch.width": width, "pruning_ratio": ratio, "batch_size": batch})
    study.optimize(objective, n_trials=6)
    assert study.trials[1].user_attrs[SAME_MODEL_AS] == 0
    assert SAME_MODEL_AS not in study.trials[2].user_attrs  # w8 unpruned is another model
    for trial in study.trials[3:]:
        assert trial.user_attrs.get(VARIANT_OF) not in (0, 1)  # both batches of it are tried
        twin = trial.params["arch.width"] == 16 and trial.params["pruning_ratio"] > 0
        assert twin == (trial.user_attrs.get(SAME_MODEL_AS) == 0)
