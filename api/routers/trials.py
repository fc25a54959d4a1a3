"""``/v1/studies/{name}/trials``: pages of trials, one trial, and its ONNX model."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, Response
from starlette.background import BackgroundTask

from api.deps import (
    ArtifactStoreDep,
    PageDep,
    SnapshotsDep,
    StorageDep,
    StudyName,
    TrialNumber,
)
from api.schemas import ErrorOut, TrialDetail, TrialOut, TrialPage
from automl.records import TrialStateName
from automl.service.exports import export_model
from automl.service.read import trial_detail

router = APIRouter(prefix="/studies/{name}/trials", tags=["trials"])
_NOT_FOUND = {404: {"model": ErrorOut, "description": "No such study or trial."}}
_ONNX = {"schema": {"type": "string", "format": "binary"}}
StateFilter = Annotated[
    TrialStateName | None,
    Query(description="Only trials in this state."),
]


@router.get("", responses=_NOT_FOUND)
def list_trials(
    name: StudyName,
    storage: StorageDep,
    snapshots: SnapshotsDep,
    page: PageDep,
    state: StateFilter = None,
) -> TrialPage:
    """The study's trials by number, optionally only those in one state (≤ 0.5 s stale)."""
    total, records = snapshots.trial_page(
        name, storage, state=state, offset=page.offset, limit=page.limit
    )
    items = [TrialOut.of(name, record) for record in records]
    return TrialPage(items=items, total=total, offset=page.offset, limit=page.limit)


@router.get("/{number}", responses=_NOT_FOUND)
def read_trial(name: StudyName, number: TrialNumber, storage: StorageDep) -> TrialDetail:
    """All metrics, stage timings, latency statistics, constraints and the failure reason."""
    return TrialDetail.of(name, trial_detail(name, storage, number))


@router.get(
    "/{number}/model",
    response_class=Response,  # no media type: only the octet-stream below is documented for 200
    responses={200: {"content": {"application/octet-stream": _ONNX}}, **_NOT_FOUND},
)
def download_model(
    name: StudyName, number: TrialNumber, storage: StorageDep, artifacts: ArtifactStoreDep
) -> FileResponse:
    """The trial's ONNX model (dynamic batch axis), as ``automl study export`` writes it: its
    metadata says how to feed it (``automl.input``, ``automl.preprocessing``, ...)."""
    folder = Path(tempfile.mkdtemp(prefix="automl-model-"))
    filename = f"{name}-trial-{number}.onnx"
    try:
        export_model(name, storage, artifacts, number, folder / filename)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return FileResponse(
        folder / filename,
        media_type="application/octet-stream",
        filename=filename,
        background=BackgroundTask(shutil.rmtree, folder, ignore_errors=True),
    )
