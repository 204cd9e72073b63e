"""The graded invalid reward (trainer.shaping): flat by default, ranked by stage when graded."""

from __future__ import annotations

import pytest

from harness_r1.trainer.shaping import InvalidRewardShape, hook_faulted


def test_flat_shape_is_the_papers_reward() -> None:
    shape = InvalidRewardShape(-0.25)
    for stage, reason in [("parse", "no_patch_block"), ("parse", "invalid_json"), ("static", "x")]:
        assert shape.rejected(stage, reason) == -0.25
    assert shape.rejected("runner", None) == -0.25
    assert shape.evaluated(0.5, {"hook_error": 3}) == 0.5


def test_graded_shape_ranks_failures_by_how_far_the_patch_got() -> None:
    shape = InvalidRewardShape(-0.4, graded=True)
    ladder = [
        shape.rejected("parse", "no_patch_block"),
        shape.rejected("parse", "invalid_json"),
        shape.rejected("parse", "invalid_patch"),
        shape.rejected("static", "banned_import"),
        shape.evaluated(0.0, {"timeout": 1}),
        shape.evaluated(0.0, {}),
    ]
    assert ladder == pytest.approx([-0.4, -0.3, -0.2, -0.1, -0.05, 0.0])
    assert ladder == sorted(ladder)
    assert shape.rejected("parse", "too_large") == shape.rejected("parse", "unknown_code") == -0.4
    assert shape.rejected("runner", "isolation") == pytest.approx(-0.1)
    # a faulting patch that still helps keeps most of its delta
    assert shape.evaluated(0.5, {"junk": 2}) == pytest.approx(0.45)


def test_graded_shape_needs_a_penalty_to_grade() -> None:
    for base in (0.0, 0.5):  # 0 grades nothing; a reward ranks the worst failures best
        with pytest.raises(ValueError, match="negative invalid_reward"):
            InvalidRewardShape(base, graded=True)
    assert InvalidRewardShape(0.5).rejected("parse", "no_patch_block") == 0.5  # flat: any value


def test_worker_lifecycle_events_are_not_hook_faults() -> None:
    assert not hook_faulted({})
    assert not hook_faulted({"restarts": 2, "recycles": 1, "junk": 0})
    assert hook_faulted({"restarts": 1, "exception": 1})
    assert InvalidRewardShape(-1.0, graded=True).evaluated(0.25, {"recycles": 4}) == 0.25
