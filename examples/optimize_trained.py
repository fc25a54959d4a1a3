"""Make a model you trained faster: prune, fine-tune, quantize and batch it, losing <= 1 %.

The script trains a small CNN on the digits the usual way (your model, your loop), then hands
the trained module and the data to ``automl.optimize``. The study's first trial is the
unmodified model, measured; every other trial records its ``speedup`` and ``accuracy_drop``
against it. The fastest model within the 1 % budget is exported.

    python examples/optimize_trained.py --out models/faster.onnx
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import automl


class DigitsCNN(nn.Module):
    """Three 3x3 convs on the 8x8 digits; automl rebuilds it as ``DigitsCNN()``."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for channels in (1, 48, 48):
            layers += [nn.Conv2d(channels, 48, 3, padding=1), nn.BatchNorm2d(48), nn.ReLU()]
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Linear(48, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def train_model(x: np.ndarray, y: np.ndarray, epochs: int = 4) -> DigitsCNN:
    """A plain training loop, standing in for yours."""
    torch.manual_seed(0)
    model = DigitsCNN()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    inputs, labels = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(epochs):
        for rows in torch.randperm(len(x)).split(32):
            loss = nn.functional.cross_entropy(model(inputs[rows]), labels[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="models/faster.onnx", help="Where the model goes.")
    parser.add_argument("--n-trials", type=int, default=8, help="COMPLETE trials to reach.")
    args = parser.parse_args()

    digits = load_digits()
    x = digits.images.astype(np.float32)[:, None] / 16.0  # (N, 1, 8, 8), as the model takes it
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.2, random_state=0, stratify=digits.target
    )
    # the validation split, on which the study scores accuracy, is held out from training
    x_train, x_val, y_train, y_val = train_test_split(
        x_train, y_train, test_size=0.15, random_state=0, stratify=y_train
    )
    model = train_model(x_train, y_train)

    dataset = {"x_train": x_train, "y_train": y_train, "x_val": x_val, "y_val": y_val}
    dataset |= {"x_test": x_test, "y_test": y_test}
    result = automl.optimize(
        name="optimize-example",
        model=model,  # the trained module; its class rebuilds it in every trial
        dataset=dataset,
        target="cpu",
        n_trials=args.n_trials,  # trial 0 is the unmodified model, measured
        remeasure=False,
    )

    print(f"{result.name}: speedup against accuracy drop ({len(result.front)} rows)")
    for row in result.front:
        m = row["metrics"]
        mark = "  <- baseline" if row["baseline"] else ""
        print(
            f"  trial {row['number']}: {m['speedup']:.2f}x faster per sample than the baseline "
            f"({m['speedup_same_batch']:.2f}x at the same batch), "
            f"accuracy drop {m['accuracy_drop']:+.3f}, {row['params']}{mark}"
        )
    best = result.best("speedup", budget="accuracy_drop <= 0.01")
    sidecar = result.export(best, args.out)
    print(f"exported trial {sidecar['trial']} to {args.out}")


if __name__ == "__main__":
    main()
