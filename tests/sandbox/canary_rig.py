"""Shared pieces of the canary tests (test_canary*.py; conftest.py registers its fixtures): a
tiny in-test env (a test double for a real env's rules) with flags that make its engine flaky,
slow or broken, an eight-task batch on it, the patches most tests run, and the canary runner on
real isolated hook workers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness_r1.contracts import HookCode, HookName, Patch, TaskSpec
from harness_r1.envs.base import EnvError, EnvSuite, StepResult
from harness_r1.harness import HarnessRuntime, HookSet, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.sandbox.canary import BaselineCache, CanaryBatch, CanaryConfig, CanaryRunner
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.sandbox.static import check_patch


class DoorEnv:
    """`open door` wins on even task numbers; odd tasks are solved by `look` then `open door`.
    `fail_resets` makes the first N resets raise EnvError (flaky infrastructure)."""

    name = "door"
    fail_resets = 0
    always_fail = False
    trap_action: str | None = None  # an action on which the engine breaks (EnvError)
    resets = 0  # successful resets, over all instances: the episodes really run
    reset_calls = 0  # every reset asked for, failed ones included: the attempts made
    step_seconds = 0.0  # how long the engine takes per step

    def __init__(self) -> None:
        self.done = False
        self.looked = False
        self.task = ""

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        DoorEnv.reset_calls += 1
        if DoorEnv.always_fail:
            raise EnvError("engine down")
        if DoorEnv.fail_resets > 0:
            DoorEnv.fail_resets -= 1
            raise EnvError("flaky engine")
        DoorEnv.resets += 1
        self.done, self.looked, self.task = False, False, task.task_id
        return "A room with a door.", {"admissible_actions": ["open door", "look"]}

    def step(self, action: str) -> StepResult:
        time.sleep(DoorEnv.step_seconds)
        if self.done:
            raise EnvError("over")
        if action == DoorEnv.trap_action:
            raise EnvError(f"engine broke on {action!r}")
        info: dict[str, Any] = {"admissible_actions": ["open door", "look"]}
        if action == "look":
            self.looked = True
            return StepResult("You see a door.", 0.0, False, False, info)
        if action == "open door":
            self.done = True
            won = int(self.task[1:]) % 2 == 0 or self.looked
            return StepResult("Opened.", float(won), True, False, {**info, "success": won})
        return StepResult("Nothing happens.", 0.0, False, False, {**info, "invalid_action": True})

    def close(self) -> None:
        pass


class Prompter:
    def system_prompt(self, task: TaskSpec) -> str:
        return "Open the door."

    def first_message(self, task: TaskSpec, observation: str, info: dict[str, Any]) -> str:
        return observation

    def feedback_message(self, observation: str, info: dict[str, Any]) -> str:
        return observation

    def extract_action(self, raw_output: str, info: dict[str, Any]) -> str:
        return raw_output.removeprefix("ACTION: ")


SUITE = EnvSuite(
    name="door",
    splits=("t",),
    default_max_steps=4,
    make_env=lambda root: DoorEnv(),
    load_tasks=lambda root, split: [],
    prompter=Prompter(),
    data_files=lambda root: {},
)


TASKS = tuple(
    TaskSpec(env="door", split="t", task_id=f"d{i}", task_type="door", instruction="x", max_steps=4)
    for i in range(8)
)


BATCH = CanaryBatch("door", TASKS, tuple(range(8)))


def patch(code: str, hook: HookName = HookName.PRE_ACTION) -> Patch:
    return Patch(env="door", hooks=[HookCode(hook=hook, code=code)])


OPEN = patch("def hook(ctx, state):\n    return {'effect': 'force', 'text': 'open door'}\n")


LOOK_THEN_OPEN = patch(
    "def hook(ctx, state):\n"
    "    if ctx['step'] == 0:\n"
    "        return {'effect': 'force', 'text': 'look'}\n"
    "    return {'effect': 'force', 'text': 'open door'}\n"
)


RAISING = patch("def hook(ctx, state):\n    return ctx['missing']\n")


HOSTILE = patch("import os\ndef hook(ctx, state):\n    return None\n")


@pytest.fixture
def door_env_reset() -> None:
    """DoorEnv's class-wide flags and counters back to a working engine, counted from zero
    (each canary test module uses it on every test)."""
    DoorEnv.fail_resets = 0
    DoorEnv.always_fail = False
    DoorEnv.resets = 0
    DoorEnv.reset_calls = 0
    DoorEnv.step_seconds = 0.0


def validator(p: Patch) -> str | None:
    report = check_patch(p)
    return None if report.ok else f"{report.violations[0].code}: {report.violations[0].message}"


def runner(policy: ScriptedPolicy, **config: Any) -> CanaryRunner:
    """A canary on the door env; without the patch-alone control unless asked for, so the
    episode counts the tests assert are the model's (the control has tests of its own)."""
    config.setdefault("patch_alone", False)
    runtime = HarnessRuntime(SUITE, policy, Path("."), RunConfig(lockstep=32))
    sandbox = SandboxConfig()

    def factory(p: Patch, candidate_id: str) -> HookSet:
        return IsolatedHooks(p, sandbox, overlay_id=candidate_id)

    return CanaryRunner(runtime, factory, validator, CanaryConfig(**config), BaselineCache())


@pytest.fixture
def dancing_canary() -> CanaryRunner:
    """A canary whose model always answers `dance` (it never opens the door): the baseline fails
    every task, so a candidate's delta is what its patch wins."""
    return runner(ScriptedPolicy(["ACTION: dance"]))
