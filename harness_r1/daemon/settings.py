"""Settings: read once at the entry point (`HARNESS_R1_*`), passed down as plain objects."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from harness_r1.envs.data import default_data_root


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HARNESS_R1_", extra="ignore")

    data: Path | None = Field(
        default=None,
        description="Data root with alfworld/, dbbench/, webshop/ (default ../shared/benchmarks).",
    )
    cache: Path = Field(
        default=Path.home() / ".cache" / "harness-r1",
        description="Cache of converted model checkpoints (HARNESS_R1_CACHE).",
    )

    @field_validator("data")
    @classmethod
    def _exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(f"HARNESS_R1_DATA={value} is not a directory; point it at a data root")
        return value

    def data_root(self) -> Path:
        root = self.data or default_data_root()
        if root is None:
            raise SystemExit(
                "no benchmark data found: set HARNESS_R1_DATA to a data root, or run "
                "`harness-r1 data fetch ENV` (default location ../shared/benchmarks)"
            )
        return root
