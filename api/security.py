"""Bearer-token authentication: tokens come from settings; only their hashes are kept."""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from automl.errors import SpecError

if TYPE_CHECKING:
    from automl.settings import Settings

DEV_TOKEN = "automl-dev"  # accepted only in dev mode when no token is configured


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def configured_tokens(settings: Settings) -> list[str]:
    """The tokens from ``AUTOML_API_TOKENS`` and ``AUTOML_API_TOKEN_FILE`` (one a line).

    Raises:
        SpecError: The token file cannot be read.
    """
    tokens = [t.get_secret_value() for t in settings.api_tokens]
    if settings.api_token_file is not None:
        try:
            lines = settings.api_token_file.read_text().splitlines()
        except OSError as e:
            raise SpecError(f"cannot read the API token file: {e}") from e
        tokens += [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return [t for t in tokens if t]


class TokenVerifier:
    """Checks a presented token against the configured ones by SHA-256, in constant time."""

    def __init__(self, tokens: list[str]) -> None:
        self._digests = [_digest(t) for t in tokens]

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenVerifier:
        """The configured tokens, or the dev token in dev mode when none is configured.

        Raises:
            SpecError: No token is configured outside dev mode.
        """
        tokens = configured_tokens(settings)
        if not tokens and not settings.dev_mode:
            raise SpecError(
                "no API token configured: set AUTOML_API_TOKENS or AUTOML_API_TOKEN_FILE "
                f"(or AUTOML_DEV_MODE=true to accept {DEV_TOKEN!r} on loopback)"
            )
        return cls(tokens or [DEV_TOKEN])

    def verify(self, token: str) -> bool:
        """Whether ``token`` is one of the configured tokens."""
        digest = _digest(token)
        # every comparison runs: no early exit that timing could reveal
        return any([hmac.compare_digest(digest, known) for known in self._digests])
