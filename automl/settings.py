"""Settings: one pydantic-settings class; nothing else reads the environment."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_STORAGE = "sqlite:///studies/automl.db"


class Settings(BaseSettings):
    """Read from ``AUTOML_*`` environment variables (and ``.env``)."""

    model_config = SettingsConfigDict(env_prefix="AUTOML_", env_file=".env", extra="ignore")

    storage: str = DEFAULT_STORAGE
    artifacts_dir: Path = Path("studies/artifacts")
    data_root: Path = Path("data")
    sqlite_timeout_s: float = 60.0
    pool_size: int = Field(default=2, ge=1)
    max_overflow: int = Field(default=2, ge=0)
    heartbeat_interval_s: int = Field(default=30, ge=1)
    grace_period_s: int = Field(default=120, ge=2)
    max_retry: int = Field(default=1, ge=0)
    cache_enabled: bool = True
    cache_max_mb: int = Field(default=512, ge=1)

    api_tokens: list[SecretStr] = Field(default_factory=list)
    api_token_file: Path | None = None
    dev_mode: bool = False
    max_n_trials: int = Field(default=500, ge=1)
    max_timeout_s: float = Field(default=24 * 3600, gt=0)
    max_body_bytes: int = 1024 * 1024


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()
