"""The harness engineer: what proposes patches and what trains the model that proposes them.

Two halves, one package. Proposing (what the daemon runs on every batch): prompt.py with
prompt_config.py, prompt_meanings.py, prompt_examples.py and prompt_packet.py, engineer.py
(generation backends), propose.py (samples through the sandbox's intake), writers.py,
teacher.py + templates/ + template_calls.py. Training (offline jobs, and the GRPO updates the
daemon schedules): coldstart*.py (coldstart.py, coldstart_rules.py, coldstart_packet.py,
coldstart_stats.py, coldstart_sources.py), sft.py, grpo.py, runs.py, model_io.py,
versions.py, replay.py, canary_reward.py, online.py, shaping.py, heldout.py and the target's
target_*.py / deployed_target.py. Why one package: training reads what proposing writes, turn
for turn (the prompt, the template calls, the output format SFT rows are rendered in), and the
daemon runs both; each training module imports torch/transformers/TRL lazily, so the proposing
half starts without them.

Modules:
- canary_reward.py: GRPO's online reward: the canary
- coldstart.py: The cold-start dataset: teacher proposals that the sandbox and the canary proved
  executable and non-regressive on the frozen target, as ...
- coldstart_packet.py: One packet of the cold start: the teacher's K proposals, checked, run
  through the canary together and judged, each written as ...
- coldstart_rules.py: The cold start's rules: what a build is configured with
  (`ColdStartConfig`) and how each candidate is judged against it, ...
- coldstart_sources.py: Where the cold start's packets come from: trajectories of training-split
  runs, cut into batches, each batch turned into one failure ...
- coldstart_stats.py: The cold start's counts: what became of each packet's proposals
  (`PacketStats`) and of the whole build (`ColdStartStats`, what ...
- deployed_target.py: Train the deployed target: LoRA on the embedded base from expert
  demonstrations
- engineer.py: Engineer generation backends: K sampled completions per prompt, with their token
  ids
- errors.py: The error every training entry point raises for inputs it cannot use, and the
  signal of a run that stopped at its time budget
- grpo.py: Outcome-based GRPO for the engineer with TRL's `GRPOTrainer`
- heldout.py: How good is an engineer version? Its proposals on held-out packets, judged like
  production
- model_io.py: The base model and the policy a training run starts from: resolving and
  fingerprinting the base, the LoRA configuration, loading model + ...
- online.py: Online GRPO's packet -> batch resolver: which tasks, with which seeds, a packet's
  patches are judged on, rebuilt from the ...
- prompt.py: The engineer's prompt: a system message that teaches the hook surface, a user
  message that renders one FailurePacket
- prompt_config.py: What the engineer's prompt is configured with: `PromptConfig`, the hooks an
  engineer may write, and the static limits the prompt states
- prompt_examples.py: The worked examples of the engineer's system message: the generic snap and
  loop examples, and one hook of an env's reference patch, ...
- prompt_meanings.py: The prompt's hand-written meanings: one line per hook, per (hook, effect)
  and per banned construct, and the ctx keys each hook gets ...
- prompt_packet.py: The engineer's user message: one FailurePacket rendered as compact,
  deterministic plain text (its episodes, their snippets around ...
- propose.py: K candidate patches for one failure packet: sample, then classify each through
  the intake
- replay.py: The replay-group format: what the daemon writes for every evaluated batch and
  GRPO's replay mode trains on (`ReplayGroup`: prompt ids, K ...
- runs.py: What every training run (SFT, GRPO) shares: the run key that makes a command
  resumable, resumable run directories, the progress meter, ...
- sft.py: Cold-start SFT of the engineer with TRL's `SFTTrainer`
- shaping.py: Graded rewards for patches that never reached a fair canary comparison
- target_experts.py: Expert demonstrations for the deployed target, played through the harness
  runtime itself
- target_sft.py: The tuned target (the paper's coevolution): the frozen target fine-tuned on its
  own successful episodes, weights updated directly, then ...
- teacher.py: Teachers for the engineer's cold start: something that writes K candidate patches
  for a failure packet, in the engineer's exact output ...
- template_calls.py: Template calls: an engineer's patch written as the template choices it
  makes, not as code
- versions.py: Published engineer adapters: `engineer/vNNNN/` (a peft adapter and
  `metadata.json`), numbered atomically and never overwritten
- writers.py: The one role "writes patches": K candidate patches for a failure packet, in the
  engineer's output format ...
- templates/: The template teacher's library of parameterised hook templates (one module per env
  plus the env-generic ones)
"""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports

if TYPE_CHECKING:
    from harness_r1.trainer.canary_reward import CanaryReward, canary_rows
    from harness_r1.trainer.coldstart import build_coldstart, packet_row
    from harness_r1.trainer.coldstart_rules import ColdStartConfig
    from harness_r1.trainer.coldstart_sources import (
        CanaryScope,
        PacketSource,
        SourceConfig,
        TaskIndex,
        sources_from_runs,
        tasks_and_seeds,
    )
    from harness_r1.trainer.coldstart_stats import ColdStartStats, PacketStats
    from harness_r1.trainer.deployed_target import (
        DeployedRun,
        deployed_settings,
        export_adapter,
        read_rows,
        tokenize_row,
        train_deployed,
    )
    from harness_r1.trainer.engineer import (
        EngineerBackend,
        EngineerSample,
        EngineerSpec,
        build_engineer,
    )
    from harness_r1.trainer.errors import TrainingPaused
    from harness_r1.trainer.grpo import GrpoSettings, train_grpo_online, train_grpo_replay
    from harness_r1.trainer.heldout import (
        HeldOutConfig,
        HeldOutGate,
        HeldOutReport,
        NoCanary,
        PacketScore,
        evaluate_engineer,
    )
    from harness_r1.trainer.model_io import file_sha256, load_policy, resolve_base
    from harness_r1.trainer.online import load_packet_rows, packets_and_resolver
    from harness_r1.trainer.prompt import engineer_messages, render_completion, system_prompt
    from harness_r1.trainer.prompt_config import PromptConfig, hooks_without
    from harness_r1.trainer.propose import (
        Proposal,
        classify,
        load_packet,
        proposals_json,
        propose_command,
    )
    from harness_r1.trainer.replay import ReplayGroup, load_replay_groups
    from harness_r1.trainer.runs import carry_checkpoint, use_bf16
    from harness_r1.trainer.sft import SftSettings, train_sft
    from harness_r1.trainer.shaping import InvalidRewardShape
    from harness_r1.trainer.target_experts import demonstrate, episode_rows, write_rows
    from harness_r1.trainer.target_sft import (
        check_runs_of,
        executed_success_rows,
        merge_checkpoint,
        own_success_rows,
        read_records,
    )
    from harness_r1.trainer.teacher import (
        TeacherConfig,
        TemplateChoice,
        TemplateTeacher,
        choices_in,
    )
    from harness_r1.trainer.template_calls import call_of, template_call
    from harness_r1.trainer.versions import (
        latest_version,
        list_versions,
        read_metadata,
        versions_dir,
    )
    from harness_r1.trainer.writers import EngineerWriter, PatchWriter, TemplateWriter

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "CanaryReward",
    "CanaryScope",
    "ColdStartConfig",
    "ColdStartStats",
    "DeployedRun",
    "EngineerBackend",
    "EngineerSample",
    "EngineerSpec",
    "EngineerWriter",
    "GrpoSettings",
    "HeldOutConfig",
    "HeldOutGate",
    "HeldOutReport",
    "InvalidRewardShape",
    "NoCanary",
    "PacketScore",
    "PacketSource",
    "PacketStats",
    "PatchWriter",
    "PromptConfig",
    "Proposal",
    "ReplayGroup",
    "SftSettings",
    "SourceConfig",
    "TaskIndex",
    "TeacherConfig",
    "TemplateChoice",
    "TemplateTeacher",
    "TemplateWriter",
    "TrainingPaused",
    "build_coldstart",
    "build_engineer",
    "call_of",
    "canary_rows",
    "carry_checkpoint",
    "check_runs_of",
    "choices_in",
    "classify",
    "demonstrate",
    "deployed_settings",
    "engineer_messages",
    "episode_rows",
    "evaluate_engineer",
    "executed_success_rows",
    "export_adapter",
    "file_sha256",
    "hooks_without",
    "latest_version",
    "list_versions",
    "load_packet",
    "load_packet_rows",
    "load_policy",
    "load_replay_groups",
    "merge_checkpoint",
    "own_success_rows",
    "packet_row",
    "packets_and_resolver",
    "proposals_json",
    "propose_command",
    "read_metadata",
    "read_records",
    "read_rows",
    "render_completion",
    "resolve_base",
    "sources_from_runs",
    "system_prompt",
    "tasks_and_seeds",
    "template_call",
    "tokenize_row",
    "train_deployed",
    "train_grpo_online",
    "train_grpo_replay",
    "train_sft",
    "use_bf16",
    "versions_dir",
    "write_rows",
]
