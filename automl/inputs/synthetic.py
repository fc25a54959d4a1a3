"""Small synthetic datasets whose task needs a model family: for tests, examples and benches.

Each function returns the arrays of a dataset (``x_train``, ``y_train``, ``x_test``,
``y_test``, ``class_names``, and ``vocab_size`` for tokens), so that it is also a dataset
plugin: ``--dataset automl.inputs.synthetic:signals``. Nothing is downloaded.

- :func:`signals`: 1-D signals (N, 1, L); the class is the shape of a short motif placed at a
  random position in noise, so a model must find it wherever it is (a conv's job).
- :func:`images`: 3-channel uint8 images (N, 3, S, S); the class is the shape of a small glyph
  at a random position, in a random colour, on noise.
- :func:`tokens`: token ids (N, L); the class is whether marker ``A`` comes before marker ``B``
  among random filler tokens: the same tokens in another order are another class.
"""

from __future__ import annotations

import numpy as np

_MOTIF = 12
_GLYPH = 5
MARKERS = (1, 2)  # token ids of A and B; 0 is left free (e.g. for padding)


def signals(n_train: int = 600, n_test: int = 200, length: int = 64, seed: int = 0) -> dict:
    """1-D signals of four motif classes (sine, square, ramp, spike) in Gaussian noise."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, _MOTIF, endpoint=False)
    motifs = np.stack(
        [
            np.sin(4 * np.pi * t),
            np.where(t < 0.5, 1.0, -1.0),
            2 * t - 1,
            np.exp(-(((t - 0.5) / 0.08) ** 2)) * 2 - 0.5,
        ]
    )

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.arange(n) % len(motifs)
        x = rng.normal(0, 0.4, size=(n, 1, length))
        starts = rng.integers(0, length - _MOTIF + 1, size=n)
        for i, (label, start) in enumerate(zip(y, starts, strict=True)):
            x[i, 0, start : start + _MOTIF] += motifs[label] * rng.uniform(1.0, 1.5)
        return x.astype(np.float32), y

    return _dataset(draw, n_train, n_test, ["sine", "square", "ramp", "spike"])


def images(n_train: int = 600, n_test: int = 200, size: int = 32, seed: int = 0) -> dict:
    """Images with one of four glyphs (cross, ring, diagonal, bar) at a random position."""
    rng = np.random.default_rng(seed)
    g = np.zeros((4, _GLYPH, _GLYPH))
    g[0, _GLYPH // 2, :] = g[0, :, _GLYPH // 2] = 1  # cross
    g[1, [0, -1], :] = g[1, :, [0, -1]] = 1  # ring
    g[2] = np.eye(_GLYPH)  # diagonal
    g[3, :, 1:-1] = 1  # bar
    g[3, :, 2] = 0

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.arange(n) % len(g)
        x = rng.normal(0, 0.3, size=(n, 3, size, size))
        rows, cols = rng.integers(0, size - _GLYPH + 1, size=(2, n))
        colours = rng.uniform(0.6, 1.4, size=(n, 3))
        for i in range(n):
            patch = g[y[i]][None] * colours[i][:, None, None]
            x[i, :, rows[i] : rows[i] + _GLYPH, cols[i] : cols[i] + _GLYPH] += patch
        return np.clip(96 + 96 * x, 0, 255).astype(np.uint8), y  # 8-bit pixels, as photos are

    return _dataset(draw, n_train, n_test, ["cross", "ring", "diagonal", "bar"])


def tokens(
    n_train: int = 1000, n_test: int = 300, length: int = 16, vocab_size: int = 32, seed: int = 0
) -> dict:
    """Token ids with markers A and B once each among filler; class 1 when A comes first."""
    rng = np.random.default_rng(seed)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.integers(max(MARKERS) + 1, vocab_size, size=(n, length))
        y = np.arange(n) % 2
        for i in range(n):
            a, b = sorted(rng.choice(length, size=2, replace=False))
            x[i, a], x[i, b] = MARKERS if y[i] else MARKERS[::-1]
        return x.astype(np.int64), y

    return {**_dataset(draw, n_train, n_test, ["B first", "A first"]), "vocab_size": vocab_size}


def _dataset(draw, n_train: int, n_test: int, class_names: list[str]) -> dict:
    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return {
        "x_train": x_train,
        "y_train": y_train,
        "x_test": x_test,
        "y_test": y_test,
        "class_names": np.array(class_names),
    }
