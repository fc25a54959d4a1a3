"""Each model family paired with the dataset of :mod:`family_data` that it takes."""

from __future__ import annotations

from automl.candidate import ArchConfig

# name: (dataset, a small architecture of the family): stages where it has them, and a last
# width of 32, so that the classifier still fills a 4-bit block once pruned by a quarter.
FAMILY_CASES = {
    "cnn-1d": ("signals", ArchConfig("cnn", 16, 1, stages=2, width_growth=2.0)),
    "mobilenet-1d": ("signals", ArchConfig("mobilenet", 16, 1, stages=2, width_growth=2.0)),
    "resnet-2d": ("images", ArchConfig("resnet", 8, 1, stages=3, width_growth=2.0)),
    "transformer": ("tokens", ArchConfig("transformer", 32, 1, heads=4)),
}
