"""``/v1/studies``: submit, list, read, stop and delete studies, and read their Pareto fronts."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Header, Response
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from api.deps import (
    ArtifactStoreDep,
    IdempotencyKey,
    PageDep,
    RenderedFrontsDep,
    SettingsDep,
    SnapshotsDep,
    StorageDep,
    StudyName,
)
from api.errors import ApiError
from api.model_check import check_model
from api.policy import check_spec
from api.rendering import API_MODEL_HREF, JsonBytes, front_csv, report_html
from api.schemas import ErrorOut, ParetoOut, StudyOut, StudyPage
from automl.report.html import render_report_html
from automl.search.spec import StudySpec
from automl.service.delete import StudyRunning, delete_study
from automl.service.read import study_page
from automl.service.studies import get_study, request_stop
from automl.service.submissions import submit_study
from automl.storage.workers import live_targets

router = APIRouter(prefix="/studies", tags=["studies"])
_NOT_FOUND = {404: {"model": ErrorOut, "description": "No such study."}}
_SUBMIT = {
    200: {"model": StudyOut, "description": "Replayed: this Idempotency-Key created it."},
    400: {"model": ErrorOut, "description": "The body is not JSON."},
    409: {"model": ErrorOut, "description": "The name is taken."},
    422: {
        "model": ErrorOut,
        "description": "The spec is invalid, or the Idempotency-Key came with another request.",
    },
    413: {"model": ErrorOut, "description": "The body is too large."},
}


@router.post("", status_code=201, responses=_SUBMIT)
def submit(
    spec: StudySpec,
    response: Response,
    storage: StorageDep,
    settings: SettingsDep,
    idempotency_key: IdempotencyKey = None,
) -> StudyOut:
    """Submit a study for the workers; a repeated ``Idempotency-Key`` returns the same one.

    A key is remembered for ``AUTOML_IDEMPOTENCY_KEY_TTL_S`` (a day by default); the same key
    with another request is refused with 422.
    """
    checks = [partial(check_model, settings=settings)] if spec.model is not None else []
    name, created = submit_study(
        check_spec(spec, settings), storage, checks=checks,
        name_given="name" in spec.model_fields_set, idempotency_key=idempotency_key,
        key_ttl_s=settings.idempotency_key_ttl_s, data_root=settings.data_root,
    )  # fmt: skip
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"/v1/studies/{name}"
    return StudyOut.of(get_study(name, storage), settings, _serving(storage, settings))


@router.get("")
def list_studies(storage: StorageDep, page: PageDep, settings: SettingsDep) -> StudyPage:
    """The studies, oldest first."""
    total, infos = study_page(storage, offset=page.offset, limit=page.limit)
    serving = _serving(storage, settings)
    items = [StudyOut.of(info, settings, serving) for info in infos]
    return StudyPage(items=items, total=total, offset=page.offset, limit=page.limit)


@router.get("/{name}", responses=_NOT_FOUND)
def read_study(name: StudyName, storage: StorageDep, settings: SettingsDep) -> StudyOut:
    """Spec, state, trial counts per state, ETA, failures, and why a queued study waits."""
    return StudyOut.of(get_study(name, storage), settings, _serving(storage, settings))


@router.post("/{name}/stop", status_code=202, responses=_NOT_FOUND)
def stop_study(name: StudyName, storage: StorageDep, settings: SettingsDep) -> StudyOut:
    """Ask the workers to stop the study after their running trials."""
    request_stop(name, storage)
    return StudyOut.of(get_study(name, storage), settings, _serving(storage, settings))


@router.delete(
    "/{name}",
    status_code=204,
    response_class=Response,
    responses={
        **_NOT_FOUND,
        409: {"model": ErrorOut, "description": "Trials are running: stop the study first."},
    },
)
async def delete(
    name: StudyName,
    storage: StorageDep,
    artifacts: ArtifactStoreDep,
    snapshots: SnapshotsDep,
    fronts: RenderedFrontsDep,
) -> Response:
    """Delete the study, its trials and their models; a study with running trials is refused
    (``POST /v1/studies/{name}/stop`` first, then delete it once they have finished)."""
    try:
        await run_in_threadpool(delete_study, name, storage, artifacts)
    except StudyRunning as e:
        raise ApiError(409, "study_running", str(e)) from None
    snapshots.forget(name)  # a new study of this name must not be served the old one's trials
    fronts.forget(name)
    return Response(status_code=204)


@router.get(
    "/{name}/pareto",
    response_model=ParetoOut,
    responses={**_NOT_FOUND, 200: {"content": {"text/csv": {"schema": {"type": "string"}}}}},
)
async def pareto(
    name: StudyName,
    storage: StorageDep,
    snapshots: SnapshotsDep,
    fronts: RenderedFrontsDep,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """The non-dominated feasible trials, with objective values, params and model links.

    JSON by default; ``Accept: text/csv`` gives one CSV row per trial.
    """
    front = snapshots.fresh_front(name) or await run_in_threadpool(snapshots.front, name, storage)
    if accept and "text/csv" in accept:
        return Response(front_csv(name, front), media_type="text/csv")
    return JsonBytes(fronts.body(name, front))


@router.get(
    "/{name}/report",
    response_model=None,
    responses={**_NOT_FOUND, 200: {"content": {"text/html": {"schema": {"type": "string"}}}}},
)
async def report(name: StudyName, storage: StorageDep, settings: SettingsDep) -> HTMLResponse:
    """The study's self-contained HTML report; its model links point at this API."""
    html = await run_in_threadpool(render_report_html, name, storage, API_MODEL_HREF)
    return HTMLResponse(report_html(html, settings.data_root))


def _serving(storage: StorageDep, settings: SettingsDep) -> frozenset[str]:
    """The targets that live workers of this storage serve."""
    return live_targets(storage, settings.heartbeat_interval_s)
