"""Responses serialized once per version of what they show."""

from __future__ import annotations

import csv
import io
import re
from typing import TYPE_CHECKING
from urllib.parse import quote

from fastapi.responses import Response

from api.errors import scrub_paths
from api.schemas import ParetoOut
from automl.records import front_columns

if TYPE_CHECKING:
    from pathlib import Path

    from automl.service.read import Front


API_MODEL_HREF = "/v1/studies/{name}/trials/{number}/model"
_SCRIPT = re.compile(r"(<script\b.*?</script>)", re.DOTALL | re.IGNORECASE)


def report_html(html: str, data_root: Path) -> str:
    """The study report as a client gets it: its text (failure reasons, the spec) without the
    server's paths (see :func:`api.errors.scrub_paths`); its scripts (plotly.js, the figures'
    data) as they are."""
    parts = _SCRIPT.split(html)  # the scripts at odd indices
    return "".join(p if i % 2 else scrub_paths(p, data_root) for i, p in enumerate(parts))


def front_csv(study: str, front: Front) -> str:
    """The front as CSV: trial number, every param and metric, and the model's URL.

    Metrics come in the order of the front's columns (see :func:`automl.records.front_columns`),
    then the others by name.
    """
    params = sorted({key for record in front.trials for key in record["params"]})
    recorded = {key for record in front.trials for key in record["metrics"]}
    shown = [c.key for c in front_columns(front.spec) if c.key in recorded]
    metrics = [*shown, *sorted(recorded - set(shown))]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["number", *params, *metrics, "model"])
    for record in front.trials:
        writer.writerow([
            record["number"],
            *(record["params"].get(key, "") for key in params),
            *(record["metrics"].get(key, "") for key in metrics),
            API_MODEL_HREF.format(name=quote(study, safe=""), number=record["number"])
            if record.get("artifact_id")
            else "",
        ])  # fmt: skip
    return out.getvalue()


class JsonBytes(Response):
    """A response whose JSON body is already serialized."""

    media_type = "application/json"


class RenderedFronts:
    """Pareto bodies keyed by front version, rendered once each.

    A front changes only when a trial completes, so the hot ``GET /pareto`` path skips
    validating and serializing it on every request. Used from the event loop only.
    """

    def __init__(self) -> None:
        self._bodies: dict[str, tuple[tuple[int, int], bytes]] = {}

    def body(self, study: str, front: Front) -> bytes:
        """The JSON of ``ParetoOut`` for ``front``."""
        cached = self._bodies.get(study)
        if cached is None or cached[0] != front.key:
            cached = (front.key, ParetoOut.of(study, front).model_dump_json().encode())
            self._bodies[study] = cached
        return cached[1]

    def forget(self, study: str) -> None:
        """Drop the body of a deleted study: a new study of its name may reuse its key."""
        self._bodies.pop(study, None)
