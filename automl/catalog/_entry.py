"""The base of every catalog entry: defining a subclass with a ``name`` registers one frozen
instance of it (Olive registers its passes the same way)."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from automl.errors import SpecError

# A Sphinx role in a docstring (":mod:`x`"), shown as plain "`x`".
_ROLE = re.compile(r":[a-z]+:(`[^`]+`)")


class Entry:
    """A catalog entry: one frozen instance per subclass, registered under its ``name``."""

    name: ClassVar[str]
    _registry: ClassVar[dict[str, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:  # an abstract kind (Method, Backend), not an entry
            return
        if cls.name in cls._registry:
            raise SpecError(f"{cls.__name__}: the name {cls.name!r} is already registered")
        cls._registry[cls.name] = cls()

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"catalog entry {self.name!r} is frozen")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def description(self) -> str:
        """The entry's docstring, as plain text: what it does, in a sentence or two."""
        text = " ".join((type(self).__doc__ or "").split())
        return _ROLE.sub(r"\1", text).replace("``", "`")
