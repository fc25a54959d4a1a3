"""Responses serialized once per version of what they show."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi.responses import Response

from api.schemas import ParetoOut

if TYPE_CHECKING:
    from automl.queries import Front


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
