"""Deploy: what decides which overlay runs in production agents, and how it gets there.

registry.py + registry_*.py (overlays, lineage, lifecycle, audit events, per-target counters;
SQLAlchemy), overlay_views.py (diffs and `overlay show`), signing.py (Ed25519 envelopes, keys),
publisher.py + control_effect.py (signed releases and control commands, registry kept in step),
client.py + state.py (the agent-side client: verify, swap at episode boundaries, survive the
broker being away), guard.py + guard_loop.py (the live guard's sequential test and its
promotion or rollback).

Modules:
- acceptance.py: When a verified release or control command is accepted: the rules beyond the
  signature
- agent.py: A deployed agent: the harness runtime driven under the overlay client's leases
- client.py: The agent-side overlay client: what a deployed agent embeds next to the harness
  runtime
- cohort.py: Staged-release cohorts: which agents apply a release with `rollout_fraction < 1`
- control_effect.py: A control command's effect on the overlay registry: `record_control`, its
  two recorders
- guard.py: The live guard: after a staged release, compare live success on the new overlay with
  the agents kept on the previous harness (the ...
- guard_loop.py: Wiring of the live guard: live trajectories in, one signed promotion or
  rollback out
- overlay_views.py: Operator views of overlays: hook-by-hook diffs and the JSON of `overlay show`
- promotion.py: The release policy: what happens to a candidate the gate promoted
- publisher.py: Publishing signed releases and control commands, with the registry kept in step
- registry.py: The overlay registry: every patch the daemon has released or considered, and its
  history
- registry_db.py: The overlay registry's database: its tables, and one write transaction shared
  by calls
- registry_records.py: The overlay registry's vocabulary: lifecycle states and their moves,
  records, errors
- registry_schema.py: The overlay registry's tables: SQLAlchemy rows, and their conversion to and
  from records
- registry_targets.py: Per-target bookkeeping of the overlay registry: sequence numbers,
  high-water marks, holds
- signing.py: Ed25519 signing of overlay releases and control commands, and their verification
- sqlbase.py: What the overlay registry and the daemon's state store share about their database
- state.py: The agent-side client's durable state: what it runs, what it has accepted, where it
  reads
"""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports

if TYPE_CHECKING:
    from harness_r1.deploy.acceptance import check_stream, open_message
    from harness_r1.deploy.agent import DeployedAgent
    from harness_r1.deploy.client import (
        ClientConfig,
        ClientMetrics,
        MessageSource,
        OverlayClient,
    )
    from harness_r1.deploy.control_effect import record_control
    from harness_r1.deploy.guard import (
        GuardConfig,
        GuardDecision,
        Verdict,
        judge,
        probability_better,
    )
    from harness_r1.deploy.guard_loop import enact
    from harness_r1.deploy.overlay_views import diff_overlays, render_record
    from harness_r1.deploy.promotion import Promoter, Promotion
    from harness_r1.deploy.publisher import DeployMetrics, Publisher, PublisherConfig
    from harness_r1.deploy.registry import OverlayRegistry
    from harness_r1.deploy.registry_records import OverlayRecord, OverlayState
    from harness_r1.deploy.signing import (
        Keyring,
        Rejection,
        Signer,
        VerificationError,
        generate_keypair,
        open_envelope,
    )
    from harness_r1.deploy.sqlbase import DEFAULT_BUSY_TIMEOUT_MS, SqlDatabase, UtcDateTime

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "ClientConfig",
    "ClientMetrics",
    "DEFAULT_BUSY_TIMEOUT_MS",
    "DeployMetrics",
    "DeployedAgent",
    "GuardConfig",
    "GuardDecision",
    "Keyring",
    "MessageSource",
    "OverlayClient",
    "OverlayRecord",
    "OverlayRegistry",
    "OverlayState",
    "Promoter",
    "Promotion",
    "Publisher",
    "PublisherConfig",
    "Rejection",
    "Signer",
    "SqlDatabase",
    "UtcDateTime",
    "Verdict",
    "VerificationError",
    "check_stream",
    "diff_overlays",
    "enact",
    "generate_keypair",
    "judge",
    "open_envelope",
    "open_message",
    "probability_better",
    "record_control",
    "render_record",
]
