"""Submit a small study to a running ``automl serve``, wait for it, download a front model.

Start the service first, on a machine that has the target, e.g.

    AUTOML_API_TOKENS='["a-long-random-token"]' automl serve --workers 1

then, from anywhere that reaches it (only ``httpx`` is needed here):

    AUTOML_API_URL=http://127.0.0.1:8000 AUTOML_API_TOKEN=a-long-random-token \\
        python examples/submit_over_rest.py --out model.onnx
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

import httpx


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("AUTOML_API_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("AUTOML_API_TOKEN"))
    parser.add_argument("--out", default="model.onnx", help="Where the model goes.")
    parser.add_argument("--n-trials", type=int, default=3)
    parser.add_argument("--wait-s", type=float, default=600, help="Give up after this long.")
    args = parser.parse_args()
    if not args.token:
        parser.error("give --token or set AUTOML_API_TOKEN")

    spec = {
        "search_space": "digits-mlp",
        "dataset": "digits",
        "target": "cpu",
        "n_trials": args.n_trials,
        "constraints": ["latency_p99_ms <= 50"],
    }
    headers = {"Authorization": f"Bearer {args.token}"}
    with httpx.Client(base_url=args.url, headers=headers, timeout=30) as client:
        # The key makes a retried submission return the same study instead of a second one.
        response = client.post(
            "/v1/studies", json=spec, headers={"Idempotency-Key": str(uuid.uuid4())}
        )
        response.raise_for_status()
        name = response.json()["name"]
        print(f"submitted study {name}")

        deadline = time.monotonic() + args.wait_s
        while True:
            study = client.get(f"/v1/studies/{name}").raise_for_status().json()
            if study["state"] not in ("queued", "running"):
                break
            if time.monotonic() > deadline:
                print(f"gave up waiting; study {name} is {study['state']}", file=sys.stderr)
                return 1
            time.sleep(1)
        print(f"study {name} is {study['state']}: {study['counts']['COMPLETE']} trials complete")
        if study["state"] != "done":
            print(f"failures: {study['failures']}", file=sys.stderr)
            return 1

        front = client.get(f"/v1/studies/{name}/pareto").raise_for_status().json()["trials"]
        for trial in front:
            print(
                f"  trial {trial['number']}: accuracy {trial['metrics']['accuracy']:.3f}, "
                f"{trial['metrics']['latency_per_sample_ms'] * 1000:.2f} us/sample"
            )
        if not front:
            print("no trial met the constraints", file=sys.stderr)
            return 1
        first = front[0]
        model = client.get(first["model_url"]).raise_for_status()
        with open(args.out, "wb") as f:
            f.write(model.content)
        print(f"downloaded trial {first['number']} to {args.out} ({len(model.content)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
