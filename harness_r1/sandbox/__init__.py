"""The sandbox: model-written patches are hostile. parse.py (engineer output -> Patch),
static.py + static_codes.py + static_report.py + static_checker.py (AST rules with stable codes),
hooklib.py (what a hook may use), executor.py + sandbox_config.py + worker_faults.py +
worker_process.py + worker_main.py + isolation.py (the isolated warm worker), canary.py (paired
re-runs of the frozen target), gate.py (promotion decisions), patchfile.py + reference_patches/.

Modules:
- canary.py: The canary: re-run the frozen target on the same tasks and seeds with and without a
  patch
- canary_factory.py: The one way to assemble a canary: the frozen target's runtime, isolated
  hook workers for the candidates, the intake's static checks and ...
- compose.py: Fold an overlay chain (the incumbent's links plus a new one) into one composed
  Patch
- executor.py: IsolatedHooks: the HookSet that runs a patch's hooks in a warm, isolated worker
  process
- gate.py: The promotion gate: a patch is promoted only on evidence, never by default
- gated.py: A candidate group through the canary and the promotion gate in one call
- hooklib.py: What a hook can see besides its arguments: the whitelisted builtins, `re`, `math`,
  `similarity` and `closest`
- intake.py: Patch intake: the one place a patch is judged fit to run, and the one wording of a
  refusal
- isolation.py: Process isolation layers, applied inside the hook worker before it runs any hook
  code
- metrics.py: Prometheus metrics of the sandbox, built against a registry the caller passes in
  (the daemon owns the registry and exposes it; tests ...
- parse.py: Parse an engineer model's output into the Patch contract
- patchfile.py: Patch files on disk: a Patch as JSON, engineer output, or the sectioned `.patch`
  format
- sandbox_config.py: SandboxConfig: how hook workers are isolated and budgeted (limits, uids,
  time budgets, and the development and test switches)
- static.py: Static checks of a Patch: the first (and weakest) layer of the sandbox
- static_checker.py: The static checker's AST visitor: one walk over a hook module that applies
  every rule and records each violation at its line and column
- static_codes.py: The static checks' vocabulary: the stable violation codes, the message each
  one gives, and the names, modules and attributes a hook may not use
- static_report.py: What the static checks are given and what they give back: their numeric
  limits (`StaticLimits`), a `Violation`, per-hook `HookStats` and the `StaticReport` of a patch
- worker_faults.py: The faults a call to a hook worker can end with: the counter in `events` each
  one increments, and `_Fault`, the exception that carries one in the parent
- worker_main.py: The hook worker: a warm child process that runs model-written hooks behind
  isolation layers
- worker_process.py: The parent's side of one hook worker process: starting it (the bootstrap
  command line, the hello with its isolation report, loading the hooks), one JSON request and
  its answer under a deadline, and killing it
"""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports

if TYPE_CHECKING:
    from harness_r1.sandbox.canary import (
        BASE_INCUMBENT,
        WORKER_EVENTS,
        BaselineCache,
        CanaryBatch,
        CanaryConfig,
        CanaryProgress,
        CanaryRunner,
        Candidate,
        Incumbent,
        InfraFailure,
        composed_overlay,
    )
    from harness_r1.sandbox.canary_factory import build_canary_runner
    from harness_r1.sandbox.compose import (
        CompositionRefused,
        Link,
        compose_chain,
        effective_sources,
    )
    from harness_r1.sandbox.executor import IsolatedHooks
    from harness_r1.sandbox.gate import (
        GATE_PROFILES,
        GateConfig,
        GateDecision,
        PairedOutcome,
        attribution_refusal,
        decide,
    )
    from harness_r1.sandbox.gated import Evaluator, GatedReport, best_promoted, pairs_of, run_gated
    from harness_r1.sandbox.hooklib import (
        ALLOWED_BUILTINS,
        CATCHABLE_EXCEPTIONS,
        MATH_EXPORTS,
        RE_EXPORTS,
        hook_globals,
    )
    from harness_r1.sandbox.intake import (
        Intake,
        RenderedCall,
        Stage,
        check,
        first_violation,
        static_validator,
        take_in,
    )
    from harness_r1.sandbox.metrics import SandboxMetrics
    from harness_r1.sandbox.parse import (
        MAX_INPUT_CHARS,
        SECTION_LINE,
        parse_engineer_output,
        patch_block,
        render_completion,
    )
    from harness_r1.sandbox.patchfile import (
        REFERENCE_DIR,
        PatchFileError,
        load_patch_file,
        parse_sectioned,
        reference_patches,
    )
    from harness_r1.sandbox.sandbox_config import SandboxConfig
    from harness_r1.sandbox.static import check_patch
    from harness_r1.sandbox.static_codes import BANNED_NAMES, Code
    from harness_r1.sandbox.static_report import StaticLimits

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "ALLOWED_BUILTINS",
    "BANNED_NAMES",
    "BASE_INCUMBENT",
    "BaselineCache",
    "CATCHABLE_EXCEPTIONS",
    "CanaryBatch",
    "CanaryConfig",
    "CanaryProgress",
    "CanaryRunner",
    "Candidate",
    "Code",
    "CompositionRefused",
    "Evaluator",
    "GATE_PROFILES",
    "GateConfig",
    "GateDecision",
    "GatedReport",
    "Incumbent",
    "InfraFailure",
    "Intake",
    "IsolatedHooks",
    "Link",
    "MATH_EXPORTS",
    "MAX_INPUT_CHARS",
    "PairedOutcome",
    "PatchFileError",
    "REFERENCE_DIR",
    "RE_EXPORTS",
    "RenderedCall",
    "SECTION_LINE",
    "SandboxConfig",
    "SandboxMetrics",
    "Stage",
    "StaticLimits",
    "WORKER_EVENTS",
    "attribution_refusal",
    "best_promoted",
    "build_canary_runner",
    "check",
    "check_patch",
    "compose_chain",
    "composed_overlay",
    "decide",
    "effective_sources",
    "first_violation",
    "hook_globals",
    "load_patch_file",
    "pairs_of",
    "parse_engineer_output",
    "parse_sectioned",
    "patch_block",
    "reference_patches",
    "render_completion",
    "run_gated",
    "static_validator",
    "take_in",
]
