"""The frozen target a command runs episodes with: one description shared by `eval`,
`canary`, `engineer evaluate` and `train coldstart`, and one place that turns it into a policy
and a run config (it was built four times, field by field)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness_r1.harness import RunConfig
from harness_r1.harness.policies import PolicySpec, build_policy
from harness_r1.models import DEFAULT_TARGET, Policy, SamplingConfig


@dataclass(frozen=True)
class TargetSpec:
    """Which model (`kind`: an embedded one, smollm2 or gemma3, a checkpoint directory, or an
    OpenAI-compatible server at `base_url`), how it decodes, what it sees and how many
    episodes advance together. Defaults are the domain configs' (RunConfig, SamplingConfig)."""

    kind: str = DEFAULT_TARGET
    base_url: str | None = None
    model: str | None = None
    lockstep: int = PolicySpec.max_batch
    max_new_tokens: int = SamplingConfig.max_new_tokens
    temperature: float = SamplingConfig.temperature
    history_turns: int = RunConfig.history_turns
    max_steps: int | None = None
    cache_dir: Path | None = None
    prefix_cache: bool = PolicySpec.prefix_cache
    batched_decode: bool = PolicySpec.batched_decode
    draft_tokens: int = PolicySpec.draft_tokens
    dtype: str = PolicySpec.dtype

    def policy_spec(self) -> PolicySpec:
        return PolicySpec(
            kind=self.kind,
            base_url=self.base_url,
            model=self.model,
            max_batch=self.lockstep,
            sampling=SamplingConfig(
                temperature=self.temperature, max_new_tokens=self.max_new_tokens
            ),
            cache_dir=self.cache_dir,
            prefix_cache=self.prefix_cache,
            batched_decode=self.batched_decode,
            draft_tokens=self.draft_tokens,
            dtype=self.dtype,
        )

    def build_policy(self) -> Policy:
        return build_policy(self.policy_spec())

    def run_config(self, agent_id: str) -> RunConfig:
        return RunConfig(
            agent_id=agent_id,
            max_steps=self.max_steps,
            history_turns=self.history_turns,
            lockstep=self.lockstep,
        )
