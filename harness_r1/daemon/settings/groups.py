"""The nested settings groups (kafka, loop, scheduler, gate, sandbox, metrics): each setting
declared once. The loop's settings are declared here and reach the loop as they are read
(`LoopConfig.options`); the guard's group is its domain config itself (`deploy.GuardConfig`,
declared there); the gate and target fields take their defaults from the domain configs they
configure.

Why one module: every settings group side by side, so a reader (and `config reference`) sees
each key once, in one order, with its default, bounds and description.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from harness_r1.consumers import KafkaSecurity
from harness_r1.harness import RunConfig
from harness_r1.models import SamplingConfig
from harness_r1.sandbox import GATE_PROFILES, GateConfig, SandboxConfig


def _lower(value: Any) -> Any:
    """Choices are lower case; accept `JSON` or `Info` from an environment variable."""
    return value.lower() if isinstance(value, str) else value


class _Group(BaseModel):
    """A nested settings group. Unknown keys are errors: a misspelt YAML key or
    `HARNESS_R1_LOOP__BATCH_SZIE` would otherwise be ignored without a word."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


SecurityProtocol = Annotated[
    Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], BeforeValidator(_upper)
]
SaslMechanism = Annotated[
    Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], BeforeValidator(_upper)
]


class KafkaOptions(_Group):
    """The daemon's Kafka clients (the brokers themselves are `kafka_bootstrap`)."""

    group_id: str = Field(
        default="harness-r1-daemon",
        min_length=1,
        description="Name under which the daemon's trajectory reader stores its positions "
        "(in the state store) and commits offsets (for lag tools). One ingesting daemon per "
        "group: a second one started with the same group on the same state store waits as a "
        "hot standby and takes over when the first stops; canary workers on other hosts "
        "share the store's batch queue instead.",
    )
    client_id: str = Field(
        default="harness-r1-daemon",
        min_length=1,
        description="Client id in broker logs and quotas.",
    )
    request_timeout_ms: int = Field(
        default=10_000, ge=1, description="Bound on each broker request and the bootstrap."
    )
    poll_timeout_ms: int = Field(
        default=1_000,
        ge=0,
        description="How long one poll waits for records; also how quickly the loop notices "
        "a stop request when the topic is quiet.",
    )
    commit_timeout_ms: int = Field(
        default=10_000,
        ge=1,
        description="Bound on an offset commit; a commit that times out is retried, the "
        "records stay uncommitted (at-least-once).",
    )
    max_poll_records: int = Field(
        default=500, ge=1, description="Records per poll at most (one unit of commit work)."
    )
    dead_letter_topic: str = Field(
        default="harness-r1.dead-letter",
        min_length=1,
        description="Where records that cannot be parsed or processed go, with the reason.",
    )
    events_topic: str = Field(
        default="harness-r1.events",
        min_length=1,
        description="Loop events (packets, candidates, gate decisions) for other consumers.",
    )
    stuck_after_s: float = Field(
        default=60.0,
        gt=0,
        description="/readyz fails, naming the partition, when a partition is behind its end "
        "this long without progress.",
    )
    on_log_reset: Literal["stop", "earliest"] = Field(
        default="stop",
        description="A partition whose log the broker reset under the daemon's stored "
        "position (topic deleted and recreated, broker data lost or restored, retention past "
        "it): 'stop' holds it (/readyz not ready, HarnessR1IngestPartitionHeld) until "
        "`harness-r1 ingest reset`; 'earliest' reads it again from the log's start "
        "(duplicates dropped by trajectory id).",
    )
    max_record_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="A trajectory record larger than this is dead-lettered as too_large.",
    )
    security_protocol: SecurityProtocol = Field(
        default="PLAINTEXT",
        description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; used by every Kafka client "
        "(a warning at start when plaintext goes to a broker off this host).",
    )
    sasl_mechanism: SaslMechanism | None = Field(
        default=None, description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_* protocols)."
    )
    sasl_username: str | None = Field(default=None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(
        default=None,
        description="SASL password when the brokers require it; never logged or shown.",
    )
    ssl_cafile: Path | None = Field(
        default=None, description="CA bundle that verifies the brokers (default: system store)."
    )
    ssl_certfile: Path | None = Field(
        default=None, description="Client certificate (PEM) for mutual TLS."
    )
    ssl_keyfile: Path | None = Field(default=None, description="Key of ssl_certfile (PEM).")
    ssl_check_hostname: bool = Field(
        default=True, description="Check that a broker's certificate names its host."
    )
    backoff_initial_s: float = Field(
        default=0.5, gt=0, description="First wait after a broker error; doubles per retry."
    )
    backoff_max_s: float = Field(
        default=30.0, gt=0, description="Longest wait between retries after broker errors."
    )

    def security(self) -> KafkaSecurity:
        """The clients' security setup (checked: SASL needs its three fields, TLS files
        need a TLS protocol)."""
        password = self.sasl_password.get_secret_value() if self.sasl_password else None
        return KafkaSecurity(
            protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=password,
            ssl_cafile=str(self.ssl_cafile) if self.ssl_cafile else None,
            ssl_certfile=str(self.ssl_certfile) if self.ssl_certfile else None,
            ssl_keyfile=str(self.ssl_keyfile) if self.ssl_keyfile else None,
            ssl_check_hostname=self.ssl_check_hostname,
        )

    @model_validator(mode="after")
    def _security_consistent(self) -> Self:
        self.security()  # raises ValueError with what to fix
        return self

    @model_validator(mode="after")
    def _backoff_order(self) -> Self:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(
                f"backoff_max_s={self.backoff_max_s} is below backoff_initial_s="
                f"{self.backoff_initial_s}; make backoff_max_s >= backoff_initial_s "
                "(e.g. 0.5 and 30)"
            )
        return self


EngineerBackend = Annotated[
    Literal["template", "smollm2", "openai", "vllm"], BeforeValidator(_lower)
]
TargetPolicy = Annotated[Literal["smollm2-agent", "smollm2", "openai"], BeforeValidator(_lower)]
TargetDtype = Annotated[Literal["auto", "float32", "bfloat16", "int8"], BeforeValidator(_lower)]
LogFormat = Annotated[Literal["json", "console"], BeforeValidator(_lower)]
LogLevel = Annotated[
    Literal["debug", "info", "warning", "error", "critical"], BeforeValidator(_lower)
]


class LoopOptions(_Group):
    """The improvement loop: failures are batched into packets, the engineer proposes K
    candidate patches per packet, each is canaried and gated, winners are released."""

    batch_size: int = Field(
        default=8,
        ge=1,
        description="B: failures per batch; a full batch becomes a packet.",
    )
    batch_window_s: float = Field(
        default=300.0,
        gt=0,
        description="T: seconds a batch stays open; a batch closes at B failures or after T.",
    )
    k: int = Field(default=4, ge=1, description="K: candidate patches the engineer samples.")
    max_pending_batches: int = Field(
        default=16,
        ge=1,
        description="Back-pressure bound: closed batches waiting for canaries; at the bound "
        "the consumer pauses instead of buffering without limit.",
    )
    canary_workers: int = Field(
        default=1, ge=1, description="Canary evaluations running at once in this process."
    )
    drain_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="How long a stop (SIGTERM, Ctrl-C) waits for the daemon's threads: a "
        "canary under way ends at its next model call and hands its batch back; one still "
        "running after this is left and the process exits 0 (keep it under the service "
        "manager's stop timeout: systemd's TimeoutStopSec=45s).",
    )
    canary_lease_s: float = Field(
        default=600.0,
        gt=0,
        description="How long a canary worker owns a work item before another may take it.",
    )
    engineer_backend: EngineerBackend = Field(
        default="template",
        description="template (no model, deterministic), smollm2 (embedded), openai "
        "(an OpenAI-compatible server at engineer_url) or vllm (in-process).",
    )
    engineer_url: str | None = Field(
        default=None, description="Base URL of the engineer's OpenAI-compatible server."
    )
    engineer_model: str | None = Field(
        default=None, description="Engineer model name (openai) or path (vllm)."
    )
    engineer_api_key: SecretStr | None = Field(
        default=None, description="API key of the engineer's server; never logged or shown."
    )
    engineer_prompt: Literal["full", "lean"] = Field(
        default="full",
        description="full: the whole hook surface with meanings and two examples (~2.6k "
        "tokens with a packet); lean: ~0.9-1.3k tokens (the live overlay named hook by hook, "
        "not shown as code), for a small engineer trained on lean rows "
        "(`train coldstart --lean-prompt`).",
    )
    target_policy: TargetPolicy = Field(
        default="smollm2-agent",
        description="The frozen target the canaries run: smollm2-agent (the deployed agent: "
        "the embedded base with its shipped adapter merged), smollm2 (the embedded base "
        "model) or openai (server at target_url).",
    )
    target_dtype: TargetDtype = Field(
        default="auto",
        description="Number format of the embedded target: auto (bf16 where the CPU computes "
        "it natively, else float32; chosen at start and logged), float32, bfloat16, int8.",
    )
    target_url: str | None = Field(
        default=None, description="Base URL of the target's OpenAI-compatible server."
    )
    target_model: str | None = Field(
        default=None, description="Target model name on that server (openai)."
    )
    target_api_key: SecretStr | None = Field(
        default=None, description="API key of the target's server; never logged or shown."
    )
    max_steps: int | None = Field(
        default=None, ge=1, description="Episode step limit (default: each env's own)."
    )
    history_turns: int = Field(
        default=RunConfig.history_turns,
        ge=0,
        description="Past exchanges the target sees in its prompt.",
    )
    guard_limit: int = Field(
        default=20,
        ge=0,
        description="Tasks in the gate's guard set (tasks that already succeed, re-run to "
        "catch regressions).",
    )
    rollout_fraction: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="Share of the pool's agents a staged release goes to; the rest are the "
        "live guard's control cohort, so it must stay below 1.",
    )
    release_target: str = Field(
        default="default",
        min_length=1,
        description="Agent pool the releases are for.",
    )
    gate_min_batch: int = Field(
        default=GateConfig.min_batch_tasks,
        ge=1,
        description="Gate: fewest batch tasks a promotion may rest on.",
    )
    gate_min_guard: int = Field(
        default=GateConfig.min_guard_tasks,
        ge=0,
        description="Gate: fewest guard tasks a promotion may rest on.",
    )
    gate_alpha: float = Field(
        default=GateConfig.alpha,
        gt=0,
        lt=1,
        description="Gate: level of the guard regression test.",
    )
    max_new_tokens: int = Field(
        default=SamplingConfig.max_new_tokens,
        ge=1,
        description="Frozen target: tokens generated per decision (canary).",
    )
    invalid_reward: float = Field(
        default=0.0,
        le=0,
        description="GRPO reward of a stored candidate that does not parse or check (the "
        "paper's flat reward; a negative value makes validity itself learnable).",
    )
    graded_invalid: bool = Field(
        default=False,
        description="Grade invalid_reward by how far a candidate got and charge hook faults a "
        "little (trainer.shaping), as `train grpo online --graded-invalid` does.",
    )

    @model_validator(mode="after")
    def _graded_needs_a_penalty(self) -> Self:
        if self.graded_invalid and self.invalid_reward >= 0:
            raise ValueError(
                "graded_invalid grades invalid_reward: set a negative loop.invalid_reward "
                "(HARNESS_R1_LOOP__INVALID_REWARD, e.g. -0.25)"
            )
        return self

    @model_validator(mode="after")
    def _servers_named(self) -> Self:
        for role, choice in (
            ("engineer", self.engineer_backend),
            ("target", self.target_policy),
        ):
            url, model = getattr(self, f"{role}_url"), getattr(self, f"{role}_model")
            if choice == "openai" and not (url and model):
                raise ValueError(
                    f"{role} 'openai' needs {role}_url and {role}_model: set "
                    f"HARNESS_R1_LOOP__{role.upper()}_URL and "
                    f"HARNESS_R1_LOOP__{role.upper()}_MODEL (or loop.{role}_url and "
                    f"loop.{role}_model in the YAML)"
                )
        return self


class SchedulerOptions(_Group):
    """Periodic jobs: GRPO updates of the engineer, the live guard, retention, flushes."""

    jobstore_url: str | None = Field(
        default=None,
        min_length=1,
        description="SQLAlchemy URL of the job store (default: the state store's URL).",
    )
    grpo_min_groups: int = Field(
        default=8,
        ge=1,
        description="N: scored candidate groups needed before a GRPO update runs.",
    )
    grpo_cron: str | None = Field(
        default=None,
        description="When GRPO updates may run, crontab syntax ('0 3 * * *' = 03:00 daily); "
        "unset: whenever grpo_min_groups are ready.",
    )
    guard_interval_s: float = Field(
        default=30.0, gt=0, description="Seconds between live-guard evaluations."
    )
    retention_days: int = Field(
        default=30, ge=1, description="Days trajectories and packets are kept in the store."
    )
    flush_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds between flushes of buffered state (open batches, metrics).",
    )

    @field_validator("grpo_cron")
    @classmethod
    def _crontab(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not value:
            raise ValueError("empty; give crontab syntax like '0 3 * * *', or leave it unset")
        _check_crontab(value)
        return value


def _check_crontab(value: str) -> None:
    """APScheduler's own parser when it is installed (the scheduler that will run the job);
    otherwise the one check that needs no parser: five fields."""
    hint = "write 'minute hour day month weekday', e.g. '0 3 * * *' for 03:00 daily"
    try:
        from apscheduler.triggers.cron import CronTrigger
    except ImportError:
        if len(value.split()) != 5:
            raise ValueError(
                f"{value!r} has {len(value.split())} fields, crontab needs 5: {hint}"
            ) from None
        return
    try:
        CronTrigger.from_crontab(value)
    except ValueError as err:
        raise ValueError(f"{value!r} is not crontab syntax ({err}): {hint}") from err


GateProfile = Annotated[Literal["default", "advisory"], BeforeValidator(_lower)]


class GateOptions(_Group):
    """How much of the agent a patch may take over (sandbox/gate.py, attribution limits).

    `profile: advisory` holds patches to advice: at most 10% of steps forced, nothing won by
    the harness without the model; the template teacher then offers only advisory templates and
    the engineer's prompt stops inviting forced steps. `default` sets no limit (solver patches
    may be promoted, their forced share and patch-alone success still reported). A limit set
    here wins over the profile's."""

    profile: GateProfile = Field(
        default="default",
        description="default (no attribution limits) or advisory (max_forced_share 0.1, "
        "max_patch_alone_success 0; advisory templates and prompt only).",
    )
    max_forced_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Reject a candidate whose hooks forced more than this share of its batch "
        "steps (null: the profile's limit, none for default).",
    )
    max_patch_alone_success: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Reject a candidate whose overlay wins more than this share of the batch "
        "under the null policy, i.e. without the model (null: the profile's limit).",
    )

    @property
    def advisory(self) -> bool:
        return self.profile == "advisory"

    def applied_to(self, gate: GateConfig) -> GateConfig:
        """`gate` with this profile's attribution limits (the one way settings reach a gate)."""
        limits = self.limits()
        return replace(
            gate,
            max_forced_share=limits.get("max_forced_share"),
            max_patch_alone_success=limits.get("max_patch_alone_success"),
        )

    def limits(self) -> dict[str, float | None]:
        """The effective limits: the profile's, overridden by those set here."""
        limits: dict[str, float | None] = dict(GATE_PROFILES[self.profile])
        for name in ("max_forced_share", "max_patch_alone_success"):
            if getattr(self, name) is not None:
                limits[name] = getattr(self, name)
        return limits


class SandboxOptions(_Group):
    """How the canary's hook workers run candidates (see harness_r1/sandbox/sandbox_config.py)."""

    accept_shared_uid: bool = Field(
        default=SandboxConfig.accept_shared_uid,
        description="Started as non-root, hook workers cannot take a uid of their own and "
        "every patch is refused; true accepts that they share the daemon's uid (Landlock's "
        "read denial then keeps them out of the daemon's /proc files). Reported as "
        "harness_r1_sandbox_shared_uid and one log line. Needed for a non-root container.",
    )
    call_budget_s: float = Field(
        default=SandboxConfig.call_budget_s,
        gt=0,
        description="Wall clock one hook call may take (the worker is killed past it).",
    )
    max_worker_kills: int = Field(
        default=SandboxConfig.max_worker_kills,
        ge=0,
        description="Calls that cost the worker (timeouts, memory faults) after "
        "which a candidate's hooks are no longer called in a canary and the candidate is "
        "invalid (0 = never).",
    )
    episode_hook_budget_s: float | None = Field(
        default=RunConfig.hook_budget_s,
        gt=0,
        description="Wall clock all hook calls of one episode may take together; past it the "
        "episode runs on without them and the candidate is invalid (null = no cap).",
    )

    def sandbox_config(self) -> SandboxConfig:
        return SandboxConfig(
            accept_shared_uid=self.accept_shared_uid,
            call_budget_s=self.call_budget_s,
            max_worker_kills=self.max_worker_kills,
        )


class MetricsOptions(_Group):
    """Where /metrics, /healthz and /readyz listen, and how logs are written."""

    host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="Listen address; 0.0.0.0 to be scraped from other hosts.",
    )
    port: int = Field(default=9464, ge=0, le=65535, description="Listen port; 0 picks a free one.")
    log_format: LogFormat = Field(
        default="json", description="json: one JSON object a line; console: for a terminal."
    )
    log_level: LogLevel = Field(default="info", description="Least severe level written.")
