"""The daemon's scheduler: its jobs' triggers, on a job store that outlives a database error.

apscheduler runs the jobs (flush, live guard, GRPO update, engineer refresh, retention,
announce); a job already stored keeps its next run time across restarts.

A module of its own: when jobs run and how their schedule survives restarts and a locked
database are apscheduler's concerns; what a job does is the daemon's (`Daemon.run_job`).
Jobs are stored as the text reference "harness_r1.daemon.service:run_job", not an import,
so stored schedules keep working and this module imports nothing of the process.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from harness_r1.daemon.daemon_config import DaemonConfig

log = structlog.get_logger(__name__)


def _resilient_jobstore(url: str) -> Any:
    """apscheduler's SQLAlchemy job store, except that a database error while it records a
    job's next run time does not end the scheduler: apscheduler 3.11 lets that error escape
    its main loop, and the thread dies, so no job ever ran again after one "database is
    locked" (seen with the state store's write lock held for a minute). The job keeps its old
    next run time and runs again on the next round (jobs coalesce; all of ours are safe to run
    twice); the next wake-up is retried soon. Its start is retried too (see `start`)."""
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from sqlalchemy.exc import DBAPIError

    class ResilientJobStore(SQLAlchemyJobStore):  # type: ignore[misc,unused-ignore]
        def start(self, scheduler: Any, alias: str) -> None:
            """apscheduler creates its table at start (check, then create): two daemons
            starting at once on a new database race there, and the loser died with "table
            daemon_scheduler_jobs already exists". The check is simply made again."""
            for attempt in range(5):
                try:
                    super().start(scheduler, alias)
                    return
                except DBAPIError:
                    if attempt == 4:
                        raise
                    time.sleep(0.2 * (attempt + 1))

        def update_job(self, job: Any) -> None:
            try:
                super().update_job(job)
            except DBAPIError as err:
                log.warning(
                    "scheduler_store_error", op="update_job", job=job.id, error=str(err)[:200]
                )

        def get_next_run_time(self) -> Any:
            try:
                return super().get_next_run_time()
            except DBAPIError as err:
                log.warning("scheduler_store_error", op="next_run_time", error=str(err)[:200])
                return datetime.now(UTC) + timedelta(seconds=5)

    return ResilientJobStore(url=url, tablename="daemon_scheduler_jobs")


def build_scheduler(config: DaemonConfig) -> Any:
    """A started BackgroundScheduler holding the daemon's jobs (each a call of
    `harness_r1.daemon.service:run_job` with the daemon's key and the job's name)."""
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.cron import CronTrigger
    from apscheduler.triggers.interval import IntervalTrigger

    stores: dict[str, Any] = {}
    if config.jobstore_url:
        stores["default"] = _resilient_jobstore(config.jobstore_url)
    scheduler = BackgroundScheduler(
        jobstores=stores,
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 60},
        timezone=UTC,
    )
    grpo_trigger = (
        CronTrigger.from_crontab(config.grpo_cron, timezone=UTC)
        if config.grpo_cron
        else IntervalTrigger(seconds=config.grpo_check_interval_s)
    )
    jobs = {
        "flush": IntervalTrigger(seconds=config.flush_interval_s),
        "guard": IntervalTrigger(seconds=config.guard_interval_s),
        "grpo": grpo_trigger,
        "retention": IntervalTrigger(hours=24),
        "announce": IntervalTrigger(seconds=config.announce_interval_s),
        # every daemon (not a singleton): each loads a version another one trained
        "engineer": IntervalTrigger(seconds=config.grpo_check_interval_s),
    }
    # Started paused so the persistent store is readable: a job already stored keeps its
    # schedule (next run time) across restarts; a new or changed trigger replaces it.
    scheduler.start(paused=True)
    for name, trigger in jobs.items():
        job_id = f"{config.key}:{name}"
        stored = scheduler.get_job(job_id)
        if stored is not None and str(stored.trigger) == str(trigger):
            continue
        scheduler.add_job(
            "harness_r1.daemon.service:run_job",
            trigger,
            args=[config.key, name],
            id=job_id,
            replace_existing=True,
        )
    scheduler.resume()
    return scheduler
