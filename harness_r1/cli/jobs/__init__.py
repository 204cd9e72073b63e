"""What the heavier commands run (canary, eval, engineer evaluation, data status and fetch,
patch check): plain functions over request objects, testable without typer. Imported by the
command modules inside their commands only."""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports

if TYPE_CHECKING:
    from harness_r1.cli.jobs.canary import CanaryRequest, canary_table, load_incumbent, run_canary
    from harness_r1.cli.jobs.coldstart import ColdStartRequest, run_coldstart
    from harness_r1.cli.jobs.data import fetch, status_table
    from harness_r1.cli.jobs.deployed import DEFAULT_TASKS, ExpertRequest, build_deployed
    from harness_r1.cli.jobs.engineer_eval import EngineerEvalRequest, run_engineer_eval
    from harness_r1.cli.jobs.eval import EvalRequest, run_eval
    from harness_r1.cli.jobs.patch_check import check_file
    from harness_r1.cli.jobs.target import TargetSpec

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "CanaryRequest",
    "ColdStartRequest",
    "DEFAULT_TASKS",
    "EngineerEvalRequest",
    "EvalRequest",
    "ExpertRequest",
    "TargetSpec",
    "build_deployed",
    "canary_table",
    "check_file",
    "fetch",
    "load_incumbent",
    "run_canary",
    "run_coldstart",
    "run_engineer_eval",
    "run_eval",
    "status_table",
]
