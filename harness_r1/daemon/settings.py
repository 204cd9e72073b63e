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

    state_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the state store and overlay registry "
        "(default: sqlite under the cache dir; postgresql+psycopg://... for shared state).",
    )
    kafka_bootstrap: str | None = Field(
        default=None, description="host:port[,host:port] of the Kafka brokers."
    )
    release_topic: str = "harness-r1.overlay-releases"
    control_topic: str = "harness-r1.control"
    trajectory_topic: str = "harness-r1.trajectories"
    signing_key: Path | None = Field(
        default=None, description="PEM Ed25519 private key that signs releases and commands."
    )
    keys_dir: Path | None = Field(
        default=None, description="Directory of trusted <key_id>.pub files (verification)."
    )

    @field_validator("data")
    @classmethod
    def _exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(f"HARNESS_R1_DATA={value} is not a directory; point it at a data root")
        return value

    def registry_url(self) -> str:
        if self.state_url:
            return self.state_url
        self.cache.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{self.cache / 'state.db'}"

    def require_bootstrap(self) -> str:
        if not self.kafka_bootstrap:
            raise SystemExit(
                "no Kafka brokers configured: set HARNESS_R1_KAFKA_BOOTSTRAP=host:port"
            )
        return self.kafka_bootstrap

    def require_signing_key(self) -> Path:
        if self.signing_key is None or not self.signing_key.is_file():
            raise SystemExit(
                "no signing key: set HARNESS_R1_SIGNING_KEY to a PEM private key "
                "(create one with `harness-r1 keys generate KEY_ID --dir DIR`)"
            )
        return self.signing_key

    def data_root(self) -> Path:
        root = self.data or default_data_root()
        if root is None:
            raise SystemExit(
                "no benchmark data found: set HARNESS_R1_DATA to a data root, or run "
                "`harness-r1 data fetch ENV` (default location ../shared/benchmarks)"
            )
        return root
