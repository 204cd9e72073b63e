"""The service: settings, state store, ingest, the improvement loop, scheduler, observability.

Only `harness_r1.demo` and `harness_r1.cli` import this package, and `harness_r1.agent` its
settings (an embedded agent reads the daemon's settings file). The demo is not in here: it
builds its fleet with `harness_r1.agent`, which sits above the daemon.

Modules:
- canary_log.py: The daemon's canary progress as log lines: a canary runs for minutes, and the
  person on call reading the log should see it move (and a ...
- control.py: Control commands in: the daemon reads the control topic like every agent does,
  accepts exactly what agents accept, and brings its ...
- daemon_config.py: The daemon process's plain config: the one place its defaults live
- deadletter.py: Dead letters: a record that cannot become a stored trajectory, kept with why
  and where from
- grpo_job.py: The scheduled GRPO update: stored candidate groups -> one new engineer version
- health.py: The daemon's health endpoints: /metrics, /healthz and /readyz over HTTP
- ingest.py: Trajectories in: Kafka -> validated -> deduplicated -> durable, then offsets
  committed
- ingest_progress.py: Ingest progress as the daemon sees it: lag, stuck partitions, and the
  sink it reports to
- logs.py: The daemon's logs: structlog and the standard library's logging routed to one
  handler, in one shape
- loop.py: The continual-improvement loop: failure batch -> packet -> K proposals -> sandbox +
  canary -> gate -> registry -> signed staged release ...
- loop_config.py: The improvement loop's plain config: the one place its defaults live
- metrics.py: The daemon's Prometheus metrics: `DaemonMetrics`, from consumed trajectory to
  GRPO update, and the fixed label values its series are created with
- replayable.py: Which failed trajectories the canary can replay: those whose (env, split,
  task_id) is in the daemon's benchmark data
- scheduler.py: The daemon's scheduler: its jobs' triggers, on a job store that outlives a
  database error
- service.py: The daemon process: ingest, canary workers, scheduled jobs, metrics and health,
  one stop
- tasks.py: The benchmark tasks the daemon replays, by (env, split, task_id): one index per
  daemon, shared by the canary (which replays a batch's tasks) and the ingest's replay check
- topics.py: The topics a deployment needs and the settings recommended for each, derived from
  the daemon's settings (names, the trajectory size limit)
- wiring.py: Settings -> a running Daemon: the one place that knows every component's
  constructor
- settings/: Settings: read once at the entry point, passed down as plain objects
- store/: The daemon's durable state: trajectories, consumer positions, failure batches and
  results
"""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports

if TYPE_CHECKING:
    from harness_r1.daemon.deadletter import original_record_parts
    from harness_r1.daemon.ingest import (
        IngestConfig,
        TrajectoryIngest,
        Unreadable,
        parse_trajectory,
    )
    from harness_r1.daemon.logs import configure_logging
    from harness_r1.daemon.replayable import ReplayableTasks
    from harness_r1.daemon.service import Daemon
    from harness_r1.daemon.tasks import TaskIndex
    from harness_r1.daemon.topics import recommended_topics
    from harness_r1.daemon.wiring import CanaryRunners, build_daemon

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "CanaryRunners",
    "Daemon",
    "IngestConfig",
    "ReplayableTasks",
    "TaskIndex",
    "TrajectoryIngest",
    "Unreadable",
    "build_daemon",
    "configure_logging",
    "original_record_parts",
    "parse_trajectory",
    "recommended_topics",
]
