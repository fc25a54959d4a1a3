"""Write one small ``.npz`` dataset per input kind, in the layout each model family takes.

    python examples/make_example_data.py --out data
    automl study start --space signals-cnn --dataset data/signals.npz
    automl study start --space images-resnet --dataset data/images.npz
    automl study start --space text-transformer --dataset data/tokens.npz

- ``signals.npz``: ``x_*`` float32 (N, 1, 64), one channel of length 64 (1-D convs);
- ``images.npz``: ``x_*`` uint8 pixels (N, 3, 32, 32), channels first (2-D convs);
- ``tokens.npz``: ``x_*`` int64 (N, 16) token ids and ``vocab_size`` 32 (the transformer).

Every file has ``y_train`` and ``y_test`` (int64 labels 0..K-1) and ``class_names``. The tasks
are those of :mod:`automl.inputs.synthetic`: a motif or a glyph at a random position, and the order
of two marker tokens.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from automl.inputs import synthetic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data", help="Folder for the .npz files.")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, make in (
        ("signals", synthetic.signals),
        ("images", synthetic.images),
        ("tokens", synthetic.tokens),
    ):
        arrays = make()
        np.savez_compressed(out / f"{name}.npz", **arrays)
        x = arrays["x_train"]
        print(
            f"{out / name}.npz: x_train {x.dtype} {x.shape}, {len(arrays['class_names'])} classes"
        )


if __name__ == "__main__":
    main()
