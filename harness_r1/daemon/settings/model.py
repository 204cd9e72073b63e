"""The settings object every entry point reads once, and its loader."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from pydantic import (
    Field,
    ValidationError,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from harness_r1.daemon.settings.errors import ENV_PREFIX, SettingsError, describe_error
from harness_r1.daemon.settings.groups import (
    GateOptions,
    KafkaOptions,
    LoopOptions,
    MetricsOptions,
    SandboxOptions,
    SchedulerOptions,
)
from harness_r1.daemon.settings.sources import YamlSource, config_file, config_path
from harness_r1.deploy import GuardConfig
from harness_r1.envs import default_data_root

if TYPE_CHECKING:
    from harness_r1.consumers import KafkaSettings


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid"
    )

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
    release_topic: str = Field(
        default="harness-r1.overlay-releases",
        description="Signed overlay releases, read by every agent (one partition).",
    )
    control_topic: str = Field(
        default="harness-r1.control",
        description="Signed control commands (rollback, pin, pause), read by every agent "
        "(one partition).",
    )
    trajectory_topic: str = Field(
        default="harness-r1.trajectories",
        description="Agents' trajectories, read by the ingesting daemon (docs/agents.md).",
    )
    signing_key: Path | None = Field(
        default=None, description="PEM Ed25519 private key that signs releases and commands."
    )
    keys_dir: Path | None = Field(
        default=None, description="Directory of trusted <key_id>.pub files (verification)."
    )

    kafka: KafkaOptions = Field(default_factory=KafkaOptions, description="Kafka clients.")
    loop: LoopOptions = Field(default_factory=LoopOptions, description="The improvement loop.")
    scheduler: SchedulerOptions = Field(
        default_factory=SchedulerOptions, description="Periodic jobs."
    )
    gate: GateOptions = Field(
        default_factory=GateOptions,
        description="Attribution limits of the promotion gate (the advisory profile).",
    )
    guard: GuardConfig = Field(default_factory=GuardConfig, description="The live guard.")
    sandbox: SandboxOptions = Field(
        default_factory=SandboxOptions, description="The canary's hook workers."
    )
    metrics: MetricsOptions = Field(
        default_factory=MetricsOptions, description="Metrics and health endpoints, logging."
    )

    @field_validator("data")
    @classmethod
    def _exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(
                f"{value} is not a directory; point it at a data root with alfworld/, "
                "dbbench/, webshop/"
            )
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """init > environment > YAML > defaults; no .env or secrets-dir sources, so what is in
        effect is exactly what `harness-r1 config show` can explain."""
        return init_settings, env_settings, YamlSource(settings_cls, config_path())

    @classmethod
    def from_file(cls, path: Path, **overrides: Any) -> Self:
        """Settings with `path` as the YAML source (it takes the place of HARNESS_R1_CONFIG);
        the environment and `overrides` still win over the file."""
        with config_file(path):
            return cls(**overrides)

    def masked(self) -> dict[str, Any]:
        """The effective settings, JSON-ready: secrets as `**********`, paths as strings."""
        return self.model_dump(mode="json")

    def registry_url(self) -> str:
        if self.state_url:
            return self.state_url
        self.cache.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{self.cache / 'state.db'}"

    def jobstore_url(self) -> str:
        """The scheduler's job store: its own URL, or the state store's."""
        return self.scheduler.jobstore_url or self.registry_url()

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

    def kafka_client(self, client_id: str | None = None) -> KafkaSettings:
        """The settings of every Kafka client the daemon and the CLI build, security
        included (so no command talks to the brokers in a way the daemon would not)."""
        from harness_r1.consumers import KafkaSettings

        options = self.kafka
        return KafkaSettings(
            bootstrap=self.require_bootstrap(),
            client_id=client_id or options.client_id,
            request_timeout_ms=options.request_timeout_ms,
            poll_timeout_ms=options.poll_timeout_ms,
            send_timeout_s=max(10.0, options.request_timeout_ms / 1000),
            security=options.security(),
        )

    def data_root(self) -> Path:
        root = self.data or default_data_root()
        if root is None:
            raise SystemExit(
                "no benchmark data found: set HARNESS_R1_DATA to a data root, or run "
                "`harness-r1 data fetch ENV` (default location ../shared/benchmarks)"
            )
        return root


def load_settings(config: Path | None = None) -> Settings:
    """Settings for an entry point: every bad value at once, each with where to fix it."""
    try:
        return Settings.from_file(config) if config is not None else Settings()
    except ValidationError as err:
        problems = [describe_error(error, Settings) for error in err.errors()]
        source = config if config is not None else config_path()
        where = f" (config file {source})" if source is not None else ""
        header = f"invalid settings{where}:"
        raise SettingsError("\n".join([header, *(f"  {p}" for p in problems)]), problems) from None
