"""``GET /healthz``: no authentication; checks that the storage answers."""

from __future__ import annotations

from fastapi import APIRouter
from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import SQLAlchemyError

from api.deps import StorageDep
from api.errors import ApiError
from api.schemas import ErrorOut, HealthOut

router = APIRouter(tags=["health"])


@router.get("/healthz", responses={503: {"model": ErrorOut}})
def healthz(storage: StorageDep) -> HealthOut:
    """Liveness, and whether the study storage answers a query."""
    try:
        storage.get_study_id_from_name("~healthz")  # found or not, the storage answered
    except KeyError:
        pass
    except (StorageInternalError, SQLAlchemyError, OSError) as e:
        raise ApiError(
            503, "storage_unavailable", f"storage unavailable: {type(e).__name__}"
        ) from e
    return HealthOut(status="ok", storage="ok")
