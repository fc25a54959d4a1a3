"""Settings: one pydantic-settings class; nothing else reads the environment."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from automl.errors import SpecError, validation_message

DEFAULT_STORAGE = "sqlite:///studies/automl.db"
DEFAULT_ARTIFACTS_DIR = Path("studies/artifacts")  # beside the default storage


# The range a search space may give each numeric knob: a space beyond it is refused at load
# (a kernel of 10**12 would fail every trial instead). AUTOML_KNOB_BOUNDS overrides some.
KNOB_BOUNDS: dict[str, tuple[float, float]] = {
    "arch.width": (1, 4096),
    "arch.depth": (1, 64),
    "arch.kernel_size": (1, 31),
    "arch.dropout": (0, 0.95),
    "arch.stages": (1, 8),
    "arch.width_growth": (1, 4),
    "arch.heads": (1, 64),
    "arch.mlp_ratio": (0.25, 16),
    "pruning_ratio": (0, 0.95),
    "keep_fp32": (0, 1024),
    "batch_size": (1, 4096),
    "serving.max_batch": (1, 4096),
    "serving.max_queue_delay_ms": (0, 10_000),
    "serving.instances": (1, 64),
    "finetune_epochs": (0, 1000),
    "finetune_lr": (1e-7, 10),
    "kd_alpha": (0, 1),
    "kd_temperature": (0.1, 100),
    "train.epochs": (0, 1000),
    "train.lr": (1e-7, 10),
    "train.weight_decay": (0, 1),
    "train.batch_size": (1, 65536),
}


class Settings(BaseSettings):
    """Read from ``AUTOML_*`` environment variables (and ``.env``)."""

    model_config = SettingsConfigDict(env_prefix="AUTOML_", env_file=".env", extra="ignore")

    storage: str = DEFAULT_STORAGE
    # Unset, the folder beside a SQLite storage's file (see for_command), else the default.
    artifacts_dir: Path = DEFAULT_ARTIFACTS_DIR
    data_root: Path = Path("data")
    sqlite_timeout_s: float = 60.0
    pool_size: int = Field(default=2, ge=1)
    max_overflow: int = Field(default=2, ge=0)
    heartbeat_interval_s: int = Field(default=30, ge=1)
    grace_period_s: int = Field(default=120, ge=2)
    max_retry: int = Field(default=1, ge=0)
    cache_enabled: bool = True
    cache_max_mb: int = Field(default=512, ge=1)
    # An MLflow tracking URI: each finished trial is logged there (the `mlflow` extra). Off if None.
    mlflow_uri: str | None = None

    api_tokens: list[SecretStr] = Field(default_factory=list)
    api_token_file: Path | None = None
    dev_mode: bool = False
    max_n_trials: int = Field(default=500, ge=1)
    max_timeout_s: float = Field(default=24 * 3600, gt=0)
    max_body_bytes: int = 1024 * 1024
    idempotency_key_ttl_s: float = Field(default=24 * 3600, gt=0)
    # The trained-model factories (package.module:function) a REST client may name; none by
    # default, so that a network client never names arbitrary code.
    model_factories: list[str] = Field(default_factory=list)
    # How long a REST submission of a trained model waits for its check (load, export, score)
    # before the 201; a check that takes longer is left to the worker, which fails the study
    # with the reason if the model is refused.
    model_check_timeout_s: float = Field(default=60.0, gt=0)
    # The largest dataset a study accepts: more is refused when the study is created.
    data_max_samples: int = Field(default=5_000_000, ge=1)
    data_max_features: int = Field(default=1_000_000, ge=1)
    data_max_classes: int = Field(default=100_000, ge=2)
    # The most memory a dataset load may take (arrays, the model's copy, the split), read from headers.
    data_max_mb: float = Field(default=2048, gt=0)
    knob_bounds: dict[str, tuple[float, float]] = Field(default_factory=lambda: dict(KNOB_BOUNDS))

    @field_validator("knob_bounds", mode="after")
    @classmethod
    def _over_the_defaults(cls, bounds: dict[str, tuple[float, float]]) -> dict:
        """AUTOML_KNOB_BOUNDS changes the knobs it names; the others keep their bounds."""
        return {**KNOB_BOUNDS, **bounds}

    @model_validator(mode="after")
    def _artifacts_beside_the_storage(self) -> Settings:
        """An unset ``artifacts_dir`` follows ``storage``, as :meth:`for_command` says."""
        if "artifacts_dir" not in self.model_fields_set:  # and it stays out of that set
            object.__setattr__(self, "artifacts_dir", artifacts_beside(self.storage))
        return self

    def for_command(self, storage: str | None, artifacts_dir: Path | None = None) -> Settings:
        """These settings for a command given ``--storage`` and ``--artifacts-dir`` (None
        where the option is left out).

        The artifacts folder is, first to last: ``artifacts_dir``, ``AUTOML_ARTIFACTS_DIR``
        (or ``.env``), the folder ``artifacts`` beside the file of a SQLite storage (as
        ``studies/automl.db`` has ``studies/artifacts``), else ``studies/artifacts``.
        """
        update: dict[str, object] = {"storage": storage or self.storage}
        if artifacts_dir is not None:
            update["artifacts_dir"] = Path(artifacts_dir)
        elif "artifacts_dir" not in self.model_fields_set:
            update["artifacts_dir"] = artifacts_beside(storage or self.storage)
        return self.model_copy(update=update)

    @model_validator(mode="after")
    def _grace_outlasts_heartbeats(self) -> Settings:
        if self.grace_period_s < 2 * self.heartbeat_interval_s:
            raise ValueError(
                f"AUTOML_GRACE_PERIOD_S ({self.grace_period_s}) must be at least twice "
                f"AUTOML_HEARTBEAT_INTERVAL_S ({self.heartbeat_interval_s}), or a live trial is "
                "failed as stale when one heartbeat is late"
            )
        return self


def artifacts_beside(storage: str) -> Path:
    """The folder ``artifacts`` beside the file of a SQLite storage URL; for any other URL (a
    server, an in-memory or malformed one), :data:`DEFAULT_ARTIFACTS_DIR`."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(storage)
    except ArgumentError:  # opening the storage says what is wrong with it
        return DEFAULT_ARTIFACTS_DIR
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return DEFAULT_ARTIFACTS_DIR
    return Path(url.database).parent / "artifacts"


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once.

    Raises:
        SpecError: An ``AUTOML_*`` variable has a value that is not allowed; names it.
    """
    try:
        return Settings()
    except ValidationError as e:
        problems = "; ".join(_describe(error) for error in e.errors())
        raise SpecError(f"invalid settings: {problems}") from None
    except SettingsError as e:  # a list or dict variable that is not JSON
        raise SpecError(f'invalid settings: {e}; lists are JSON, e.g. \'["a", "b"]\'') from None


def _describe(error: dict) -> str:
    if not error["loc"]:  # a rule across settings: its message names them
        return validation_message(error)
    return f"AUTOML_{str(error['loc'][0]).upper()}: {error['msg']}"
