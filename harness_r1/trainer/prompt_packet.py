"""The engineer's user message: one FailurePacket rendered as compact, deterministic plain text
(its episodes, their snippets around the failure point, and the live overlay).

Why a module of its own: the packet's rendering is what changes from one prompt to the next,
while the system message is fixed per env; it has its own cuts (snippet lengths, the lean
mode's episodes and snippets, the lean overlay summary), and reading it needs nothing of the
hook surface.
"""

from __future__ import annotations

import re

from harness_r1.contracts import FailurePacket, PacketEpisode, Snippet
from harness_r1.trainer.prompt_config import PromptConfig


def _cut(text: str, limit: int) -> str:
    text = text.replace("\r", "")
    if len(text) <= limit:
        return text
    return text[:limit] + f" ...[{len(text) - limit} chars cut]"


def _quote(text: str, limit: int) -> str:
    """One line: newlines shown as \\n so a snippet never breaks the layout."""
    return _cut(text, limit).replace("\n", "\\n")


def _episode_lines(episode: PacketEpisode, limit: int) -> list[str]:
    outcome = "succeeded" if episode.success else "failed"
    lines = [
        f"### {episode.masked_task_id} ({episode.task_type}): {outcome}, "
        f"{episode.termination} after {episode.steps} steps, reward {episode.reward:.2f}",
        "Task: " + _quote(episode.instruction, max(limit * 2, 400)),
    ]
    if episode.constraints:
        lines.append("Constraints: " + "; ".join(episode.constraints))
    if episode.failure_step is not None:
        streak = (
            f" (streak of {episode.failure_streak} repeated/invalid)"
            if episode.failure_streak
            else ""
        )
        lines.append(f"Failure point: step {episode.failure_step}{streak}")
    previous: Snippet | None = None
    for snippet in episode.snippets:
        flags = f" [{', '.join(snippet.flags)}]" if snippet.flags else ""
        same = (
            previous is not None
            and snippet.action == previous.action
            and snippet.observation == previous.observation
        )
        if same and previous is not None:
            lines.append(f"step {snippet.step}{flags}: same as step {previous.step}")
        else:
            lines.append(f"step {snippet.step}{flags} action: {_quote(snippet.action, limit)}")
            lines.append(f"  env: {_quote(snippet.observation, limit)}")
        previous = snippet
    return lines


#: Said when no rules were written for the packet's env: an uncounted signal is not an absent one.
GENERIC_RULES_NOTE = (
    "No rules are written for env {env}: invalid actions are counted only where the env "
    'answers "Nothing happens.", "Invalid action ..." or "[invalid] ...", and no task '
    "constraints were extracted. Read the observations for what went wrong."
)


def packet_text(packet: FailurePacket, config: PromptConfig | None = None) -> str:
    """The packet as the engineer reads it: compact, deterministic plain text."""
    config = config or PromptConfig()
    episodes = packet.episodes[: config.lean_episodes] if config.lean else packet.episodes
    signals = packet.signals.model_dump()
    counted = ", ".join(f"{name} {value}" for name, value in signals.items() if value)
    types = sorted({e.task_type for e in packet.episodes})
    lines = [
        f"Failure report, env {packet.env}: target {packet.target.model_id} "
        f"(version {packet.target.version}), harness {packet.harness_version}.",
        f"{packet.failures} of {packet.batch_size} episodes failed; {len(episodes)} shown.",
        f"Task types: {', '.join(types) if types else 'none'}.",
        f"Signals: {counted or 'none'}.",
    ]
    if packet.rules == "generic":
        lines.append(GENERIC_RULES_NOTE.format(env=packet.env))
    lines += _lean_incumbent_lines(packet, config) if config.lean else _incumbent_lines(packet)
    limit = config.lean_snippet_chars if config.lean else config.snippet_chars
    for episode in episodes:
        if config.lean:
            episode = episode.model_copy(
                update={"snippets": episode.snippets[-config.lean_snippets :]}
            )
        lines += ["", *_episode_lines(episode, limit)]
    lines += [
        "",
        f"Write one patch for env {packet.env} that makes the target succeed on tasks like "
        "these. Answer as <think>...</think><patch>...</patch>.",
    ]
    return "\n".join(lines)


def _incumbent_lines(packet: FailurePacket) -> list[str]:
    """The live overlay's hooks: the engineer adds what is missing, or replaces a hook."""
    if not packet.incumbent:
        return []
    lines = [
        "",
        "## Live overlay (these failures happened with it; your patch is added to it)",
        "Your hooks run after these ones. A section `# === hook: NAME (replace) ===` runs "
        "instead of the live one, `(remove)` (no code) stops it; do not repeat what is already "
        "here.",
    ]
    for hook in packet.incumbent:
        lines += [f"### {hook.hook} ({hook.links} link{'s' if hook.links > 1 else ''})", hook.code]
    return lines


_DOCSTRING = re.compile(r"^\s*(?:'{3}|\"{3})\s*(.+?)\s*(?:'{3}|\"{3}|$)", re.M)


def _lean_incumbent_lines(packet: FailurePacket, config: PromptConfig) -> list[str]:
    """The live overlay for a small engineer: per hook, what each link does (its docstring's
    first line) instead of its code, which took ~1.4k of a ~2.3k-token prompt on an incumbent
    of three templates. Enough to add what is missing or replace a hook by name."""
    if not packet.incumbent:
        return []
    lines = [
        "",
        "## Live overlay (your patch is added to it; a section `# === hook: NAME (replace) ===` "
        "runs instead of the live one, `(remove)` stops it)",
    ]
    for hook in packet.incumbent:
        said = _DOCSTRING.findall(hook.code) or [hook.code.strip().splitlines()[-1].strip()]
        summary = _quote("; ".join(said), config.lean_snippet_chars * 2)
        lines.append(f"- {hook.hook} ({hook.links} link{'s' if hook.links > 1 else ''}): {summary}")
    return lines
