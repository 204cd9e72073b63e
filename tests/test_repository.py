"""What a clone checks out stays lean: shipped model artifacts once, no copies of what a
package already ships, no optimizer states, the whole tree under a budget."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: the tracked tree's budget: every shipped adapter, result file and document fits with room
TREE_BUDGET_BYTES = 60_000_000
#: files no tracked folder may hold: the base model's tokenizer (its package ships it) and
#: training state (a run resumes from its own checkpoint folder, never from the repository)
NEVER_TRACKED = {
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "trainer_state.json",
}


def tracked_files() -> list[Path]:
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.fail(f"the repository's files cannot be listed with git: {error}")
    return [REPO / name for name in listing.split("\0") if name]


def test_the_tracked_tree_fits_its_budget() -> None:
    present = [path for path in tracked_files() if path.is_file()]
    total = sum(path.stat().st_size for path in present)
    largest = sorted(present, key=lambda p: p.stat().st_size, reverse=True)[:5]
    assert total < TREE_BUDGET_BYTES, (
        f"tracked tree {total / 1e6:.1f} MB over {TREE_BUDGET_BYTES / 1e6:.0f} MB; largest: "
        + ", ".join(f"{p.relative_to(REPO)} ({p.stat().st_size / 1e6:.1f} MB)" for p in largest)
    )


def test_no_tokenizer_copy_or_training_state_is_tracked() -> None:
    kept = sorted(
        str(path.relative_to(REPO)) for path in tracked_files() if path.name in NEVER_TRACKED
    )
    assert kept == [], kept


def test_each_model_artifact_is_tracked_once() -> None:
    """Two identical weight files are one artifact committed twice."""
    import hashlib

    seen: dict[str, str] = {}
    twice = []
    for path in tracked_files():
        if path.suffix not in {".safetensors", ".bin", ".pt", ".gguf"} or not path.is_file():
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        name = str(path.relative_to(REPO))
        if digest in seen:
            twice.append(f"{name} = {seen[digest]}")
        seen.setdefault(digest, name)
    assert twice == [], twice
