"""``/v1/targets``: the hardware targets and which are present on this server's machine."""

from __future__ import annotations

from fastapi import APIRouter

from api.schemas import TargetOut
from automl.service.read import target_present
from automl.targets import list_targets

router = APIRouter(prefix="/targets", tags=["targets"])


@router.get("")
def read_targets() -> list[TargetOut]:
    """Every known target; ``present`` tells whether workers here can measure on it."""
    return [TargetOut.of(t, present=target_present(t.name)) for t in list_targets()]
