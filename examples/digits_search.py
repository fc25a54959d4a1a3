"""Search MLPs for the digits dataset from Python, print the Pareto front, export the best.

Run from any folder: the study goes to the ``AUTOML_STORAGE`` database (by default
``studies/automl.db`` under the current folder) and its models to ``AUTOML_ARTIFACTS_DIR``.
Run it again and it resumes the same study, which is already done.

    python examples/digits_search.py --out models/best.onnx
"""

from __future__ import annotations

import argparse

import automl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="models/best.onnx", help="Where the model goes.")
    parser.add_argument("--n-trials", type=int, default=4, help="COMPLETE trials to reach.")
    args = parser.parse_args()

    result = automl.optimize(
        name="digits-example",
        search_space="digits-mlp",  # width, depth, pruning, 32/16/8/4 bits, batch size
        dataset="digits",
        target="cpu",
        objectives=["accuracy", "latency_per_sample_ms"],
        constraints=["latency_p99_ms <= 50"],
        n_trials=args.n_trials,
        seed=0,
        remeasure=False,  # .best() below re-measures the front under its budget
    )

    print(f"Pareto front of {result.name} ({len(result.front)} trials):")
    for row in result.front:
        metrics = row["metrics"]
        print(
            f"  trial {row['number']}: accuracy {metrics['accuracy']:.3f} "
            f"(test {metrics['test_accuracy']:.3f}), "
            f"{metrics['latency_per_sample_ms'] * 1000:.2f} us/sample, "
            f"{metrics['size_mb']:.3f} MB, {row['params']}"
        )

    best = result.best("accuracy", budget="latency_p99_ms <= 50")
    sidecar = result.export(best, args.out)
    print(f"exported trial {sidecar['trial']} to {args.out} (sha256 {sidecar['sha256'][:12]})")


if __name__ == "__main__":
    main()
