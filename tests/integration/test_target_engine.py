"""The target engine of issue 16 on the real SmolLM2: lockstep decode over per-row prefix
caches answers as decoding one row at a time does, a greedy episode under the new default
repeats exactly, and seeded sampling repeats."""

from __future__ import annotations

import pytest

from harness_r1.contracts import Trajectory
from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig
from harness_r1.harness.policies.factory import PolicySpec, build_policy
from harness_r1.models.base import GenerationRequest, SamplingConfig
from harness_r1.models.transformers_backend import TransformersPolicy

pytestmark = pytest.mark.integration

SYSTEM = (
    "You are an agent in a household. Answer with one command per turn, such as 'go to "
    "cabinet 1', 'open drawer 2' or 'look'. " * 2
)
OBSERVATIONS = (
    "You see a cabinet 1 and a fridge 1. Task: cool an apple.",
    "You are in a large kitchen. Around you are a desk 1, a lamp 1, a shelf 3, a stove 2, a "
    "sink 1 and a window. Task: examine a book under the lamp.",
)


def _turns(policy: TransformersPolicy) -> list[str]:
    """Two conversations of different lengths (so the lockstep batch is padded), two turns."""
    first = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": o}]
        for o in OBSERVATIONS
    ]
    answers = policy.generate([GenerationRequest(messages=c) for c in first])
    second = [
        [
            *c,
            {"role": "assistant", "content": a.text},
            {"role": "user", "content": "Nothing happens. What next?"},
        ]
        for c, a in zip(first, answers, strict=True)
    ]
    again = policy.generate([GenerationRequest(messages=c) for c in second])
    return [a.text for a in answers + again]


def test_lockstep_answers_equal_one_row_at_a_time_answers() -> None:
    sampling = SamplingConfig(max_new_tokens=12)
    serial = TransformersPolicy.embedded(sampling=sampling, prefix_cache=True, batched_decode=False)
    lockstep = TransformersPolicy.embedded(sampling=sampling, prefix_cache=True)
    assert lockstep.batched_decode and lockstep.prefix_cache is not None
    assert _turns(lockstep) == _turns(serial)
    stats = lockstep.prefix_cache.stats
    # the second conversation reuses the shared instructions, both second turns their first
    assert stats.lookups == 4 and stats.hits == 3 and stats.reuse_ratio > 0.5


def test_drafted_tokens_give_the_greedy_text_in_fewer_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Prompt-lookup drafts checked by the model keep the greedy answers (and the caches cut
    back into the store: the second turns reuse them) while taking fewer forward passes."""
    from harness_r1.models import kv_lockstep

    steps: list[int] = []
    proposals = kv_lockstep._proposals

    def counting(*args: object, **kwargs: object) -> object:
        steps.append(1)
        return proposals(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(kv_lockstep, "_proposals", counting)
    sampling = SamplingConfig(max_new_tokens=24)
    plain = TransformersPolicy.embedded(sampling=sampling, prefix_cache=True, draft_tokens=0)
    expected = _turns(plain)
    plain_steps, steps[:] = len(steps), []
    drafting = TransformersPolicy.embedded(sampling=sampling, prefix_cache=True, draft_tokens=6)
    assert _turns(drafting) == expected
    assert len(steps) < plain_steps
    assert drafting.prefix_cache is not None and drafting.prefix_cache.stats.hits == 3


def _episodes(policy: object) -> list[Trajectory]:
    root = Settings().data_root()
    suite = get_suite("dbbench")
    tasks = suite.load_tasks(root, "dev")[:2]
    config = RunConfig(max_steps=3, agent_id="it", lockstep=2)
    runtime = HarnessRuntime(suite, policy, root, config)  # type: ignore[arg-type]
    try:
        return runtime.run(
            [EpisodeSpec(task=t, seed=i, hooks=NoHooks()) for i, t in enumerate(tasks)]
        )
    finally:
        runtime.close()


def test_a_greedy_episode_is_identical_twice_under_the_new_default() -> None:
    spec = PolicySpec(max_batch=2, sampling=SamplingConfig(max_new_tokens=24))
    assert spec.prefix_cache and spec.batched_decode and spec.dtype == "auto"
    runs = [_episodes(build_policy(spec)) for _ in range(2)]
    for trajectory in runs[0]:
        assert trajectory.timings.generated_tokens > 0 and trajectory.steps
    assert [[s.raw_output for s in t.steps] for t in runs[0]] == [
        [s.raw_output for s in t.steps] for t in runs[1]
    ]
    assert [t.outcome for t in runs[0]] == [t.outcome for t in runs[1]]


def test_seeded_sampling_repeats_under_lockstep_decode() -> None:
    sampling = SamplingConfig(temperature=0.9, max_new_tokens=10)
    requests = [
        GenerationRequest(messages=[{"role": "user", "content": o}], seed=i)
        for i, o in enumerate(OBSERVATIONS)
    ]
    policies = [TransformersPolicy.embedded(sampling=sampling, prefix_cache=True) for _ in "ab"]
    texts = [[g.text for g in p.generate(requests)] for p in policies]
    assert texts[0] == texts[1] and all(texts[0])


def test_rows_that_stop_early_leave_the_other_rows_answers_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A row that hits a stop token is skipped by the attention of later steps (active_rows);
    the rows still decoding get exactly the tokens they get when nothing stops early."""
    from harness_r1.models import kv_lockstep

    seen: list[list[list[int]]] = []
    skipped: list[dict[str, object]] = []
    decode, skip = kv_lockstep.decode_together, kv_lockstep.skip_finished

    def recording_decode(*args: object, **kwargs: object) -> object:
        out = decode(*args, **kwargs)  # type: ignore[arg-type]
        seen.append([list(row.generated) for row in args[1]])  # type: ignore[attr-defined]
        return out

    def recording_skip(rows: object) -> dict[str, object]:
        kwargs = skip(rows)  # type: ignore[arg-type]
        skipped.append(kwargs)
        return kwargs

    monkeypatch.setattr(kv_lockstep, "decode_together", recording_decode)
    monkeypatch.setattr(kv_lockstep, "skip_finished", recording_skip)
    sampling = SamplingConfig(max_new_tokens=12)
    requests = [
        GenerationRequest(
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": o}]
        )
        for o in OBSERVATIONS
    ]
    TransformersPolicy.embedded(sampling=sampling, prefix_cache=True).generate(requests)
    first, second = seen[-1]
    stop = next(t for t in first[2:8] if t not in second)  # a token only row 0 produces
    early = TransformersPolicy.embedded(sampling=sampling, prefix_cache=True)
    early._stop_set = early._stop_set | {stop}
    skipped.clear()
    early.generate(requests)
    stopped, rest = seen[-1]
    assert stopped == first[: first.index(stop) + 1]
    assert rest == second
    assert any(kwargs.get("active_rows") == ((1, 2),) for kwargs in skipped)
