"""Knowledge distillation in the fine-tune: the student follows the teacher's logits."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import torch

from automl.candidate import ArchConfig, TrainConfig
from automl.inputs.data import load_dataset
from automl.models import build_model
from automl.pipeline.prune import prune
from automl.pipeline.train import logits_of, train


def _agreement(model, teacher_logits, x) -> float:
    return float((logits_of(model, x).argmax(1) == teacher_logits.argmax(1)).mean())


def test_with_only_the_distillation_term_the_student_learns_the_teacher_not_the_labels():
    data = load_dataset("digits")
    teacher = train(
        build_model(ArchConfig("mlp", width=64, depth=1), data.input_shape, 10), data,
        TrainConfig(epochs=4),
    ).model  # fmt: skip
    taught = logits_of(teacher, data.x_train)
    # Labels that carry no information: only the teacher can teach anything.
    noise = np.random.default_rng(0).permutation(data.y_train)
    noisy = dataclasses.replace(data, y_train=noise)
    students = {
        alpha: train(
            build_model(ArchConfig("mlp", width=32, depth=1), data.input_shape, 10, seed=1),
            noisy,
            TrainConfig(epochs=4, kd_alpha=alpha),
            teacher_logits=taught,
        ).model
        for alpha in (0.0, 1.0)
    }
    test_logits = logits_of(teacher, data.x_test)
    assert _agreement(students[1.0], test_logits, data.x_test) > 0.85
    assert _agreement(students[0.0], test_logits, data.x_test) < 0.5


def test_prune_distils_from_the_unpruned_model_when_kd_alpha_is_set():
    data = load_dataset("digits")
    trained = train(
        build_model(ArchConfig("mlp", width=64), data.input_shape, 10), data, TrainConfig(epochs=3)
    ).model
    runs = {
        alpha: prune(copy.deepcopy(trained), data, 0.5, TrainConfig(epochs=2, kd_alpha=alpha))
        for alpha in (0.0, 0.9)
    }
    plain, distilled = (runs[a].model.state_dict() for a in (0.0, 0.9))
    assert plain.keys() == distilled.keys()
    assert any(not torch.equal(plain[k], distilled[k]) for k in plain)  # the KD term acted
