"""What a study began on, remembered: its data's fingerprint, and its trained model's.

A study resumed on other data, or on other weights, would mix trials scored on both in one
front; both are refused, naming what changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automl.errors import DataError, InputRefused
from automl.records import SPEC_ATTR

if TYPE_CHECKING:
    import optuna

    from automl.search.spec import StudySpec

DATA_ATTR = "data_fingerprint"
MODEL_ATTR = "model_fingerprint"  # a trained model's weights, factory and its module's source


def check_fingerprint(
    study: optuna.Study, spec: StudySpec, fingerprint: str, model: str | None = None
) -> None:
    """Record the fingerprints of the data (and of the trained ``model``) with the study, or
    refuse data or a model that differ from them.

    Raises:
        DataError: The study began on other data; its trials would mix two datasets.
        InputRefused: The study began with other weights or another factory source.
    """
    checks = [(DATA_ATTR, fingerprint, f"dataset {spec.dataset_shown!r}", DataError)]
    if model is not None and spec.model is not None:
        what = f"model {spec.model.label!r} with weights {spec.model.weights!r}"
        checks.append((MODEL_ATTR, model, what, InputRefused))
    for attr, now, what, error in checks:
        stored = study.user_attrs.get(attr)
        if stored is None:
            study.set_user_attr(attr, now)
        elif stored != now:
            raise error(
                f"{what} of study {spec.name!r} has changed since the study began "
                f"(fingerprint {stored}, now {now}){_older(study, attr)}: its front would mix "
                f"trials scored on both. Restore it, or start a new study, e.g. --name "
                f"{spec.name}-v2"
            )


def _older(study: optuna.Study, attr: str) -> str:
    """Why a data fingerprint may differ with unchanged data: a study of an earlier automl,
    which standardised inputs with one scalar mean and std (its spec has no ``standardize``)."""
    if attr != DATA_ATTR or "standardize" in study.user_attrs.get(SPEC_ATTR, {}):
        return ""
    return (
        ", or the study was created by an earlier automl, which standardised inputs with one "
        "scalar mean and std where this one fits them to the layout"
    )
