"""``GET /healthz``: no authentication; checks that the storage answers and local workers live."""

from __future__ import annotations

from fastapi import APIRouter, Request
from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import SQLAlchemyError

from api.deps import StorageDep
from api.errors import ApiError
from api.schemas import ErrorOut, HealthOut

router = APIRouter(tags=["health"])


@router.get("/healthz", responses={503: {"model": ErrorOut}})
def healthz(storage: StorageDep, request: Request) -> HealthOut:
    """Liveness, whether the study storage answers a query, and how many local workers live;
    503 when the storage does not answer, or every local worker has died."""
    try:
        storage.get_study_id_from_name("~healthz")  # found or not, the storage answered
    except KeyError:
        pass
    except (StorageInternalError, SQLAlchemyError, OSError) as e:
        raise ApiError(
            503, "storage_unavailable", f"storage unavailable: {type(e).__name__}"
        ) from e
    local = getattr(request.app.state, "local_workers", None)
    if local is None or not local.expected:
        return HealthOut(status="ok", storage="ok")
    live = local.live()
    if not live:
        raise ApiError(
            503, "no_live_worker",
            f"all {local.expected} local worker(s) have died and are not started again: the "
            "server log says why; restart automl serve once fixed",
        )  # fmt: skip
    return HealthOut(status="ok", storage="ok", workers=live)
