"""``/v1/studies/{name}/trials``: pages of trials, one trial, and its ONNX model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response, StreamingResponse

from api.deps import (
    ArtifactStoreDep,
    PageDep,
    SettingsDep,
    SnapshotsDep,
    StorageDep,
    StudyName,
    TrialNumber,
)
from api.schemas import ErrorOut, TrialDetail, TrialOut, TrialPage
from automl.records import TrialStateName
from automl.service.exports import open_export
from automl.service.read import trial_detail

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import BinaryIO

router = APIRouter(prefix="/studies/{name}/trials", tags=["trials"])
_NOT_FOUND = {404: {"model": ErrorOut, "description": "No such study or trial."}}
_ONNX = {"schema": {"type": "string", "format": "binary"}}
StateFilter = Annotated[
    TrialStateName | None,
    Query(description="Only trials in this state."),
]


class OnnxStream(StreamingResponse):
    """A streamed ONNX file."""

    media_type = "application/octet-stream"


@router.get("", responses=_NOT_FOUND)
def list_trials(
    name: StudyName,
    storage: StorageDep,
    snapshots: SnapshotsDep,
    page: PageDep,
    settings: SettingsDep,
    state: StateFilter = None,
) -> TrialPage:
    """The study's trials by number, optionally only those in one state (≤ 0.5 s stale)."""
    total, records = snapshots.trial_page(
        name, storage, state=state, offset=page.offset, limit=page.limit
    )
    items = [TrialOut.of(name, record, settings.data_root) for record in records]
    return TrialPage(items=items, total=total, offset=page.offset, limit=page.limit)


@router.get("/{number}", responses=_NOT_FOUND)
def read_trial(
    name: StudyName, number: TrialNumber, storage: StorageDep, settings: SettingsDep
) -> TrialDetail:
    """All metrics, stage timings, latency statistics, constraints and the failure reason."""
    return TrialDetail.of(name, trial_detail(name, storage, number), settings.data_root)


@router.get(
    "/{number}/model",
    response_class=Response,  # no media type: only the octet-stream below is documented for 200
    responses={200: {"content": {"application/octet-stream": _ONNX}}, **_NOT_FOUND},
)
def download_model(
    name: StudyName, number: TrialNumber, storage: StorageDep, artifacts: ArtifactStoreDep
) -> OnnxStream:
    """The trial's ONNX model (dynamic batch axis), as ``automl study export`` writes it: its
    metadata says how to feed it (``automl.input``, ``automl.preprocessing``, ...). Streamed."""
    reader = open_export(name, storage, artifacts, number)
    filename = f"{name}-trial-{number}.onnx"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return OnnxStream(_chunks(reader), headers=headers)


def _chunks(reader: BinaryIO, size: int = 1 << 16) -> Iterator[bytes]:
    with reader:
        while chunk := reader.read(size):
            yield chunk
