"""Each model family of the catalog paired with the dataset of :mod:`family_data` it is tested on."""

from __future__ import annotations

from automl.candidate import ArchConfig
from automl.catalog import FAMILIES

# name: (dataset, the family's example architecture), from the catalog: a family is tested the
# moment it is registered.
FAMILY_CASES = {
    name: (
        family.example["layout"],
        ArchConfig(name, **{k: v for k, v in family.example.items() if k != "layout"}),
    )
    for name, family in FAMILIES.items()
}
# The conv families: they take signals and images, and not flat features.
CONV_FAMILIES = [
    n for n, f in FAMILIES.items() if "signals" in f.takes and "features" not in f.takes
]
