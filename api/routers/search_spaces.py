"""``/v1/search-spaces``: the registered search spaces a spec may name."""

from __future__ import annotations

from fastapi import APIRouter

from api.schemas import SearchSpaceOut
from automl.search.space import list_spaces, load_space

router = APIRouter(prefix="/search-spaces", tags=["search-spaces"])


@router.get("")
def read_search_spaces() -> list[SearchSpaceOut]:
    """Every registered space with its parameters."""
    spaces = [load_space(name) for name in list_spaces()]
    return [
        SearchSpaceOut.model_validate(s.model_dump(mode="json", exclude_none=True)) for s in spaces
    ]
