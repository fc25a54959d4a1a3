"""An uploaded weights file, checked in a child process as a trained model's load checks it.

``python -m api.weights_check PATH NAME`` exits 0 when ``PATH`` is a state dict that torch
loads with ``weights_only=True``, after the archive checks that keep a small file from
inflating in memory; otherwise it prints why, naming the file ``NAME``, and exits 2. It runs
apart because it imports torch, which the web process never does.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Check the weights file of the command line; exit 0, or print why it is refused and
    exit 2."""
    from automl.errors import SpecError
    from automl.inputs.trained_model import check_weights_file

    path, name = sys.argv[1], sys.argv[2]
    try:
        check_weights_file(path)
    except SpecError as e:
        print(str(e).replace(path, name), end="")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
