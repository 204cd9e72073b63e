"""Hook names and the effects a hook may have; shared by the runtime, patches and trajectories."""

from __future__ import annotations

from enum import StrEnum


class HookName(StrEnum):
    """The four points where a patch may touch the harness."""

    EPISODE_START = "episode_start"
    PRE_DECISION = "pre_decision"
    PRE_ACTION = "pre_action"
    POST_FEEDBACK = "post_feedback"


class EffectKind(StrEnum):
    """Every effect the runtime can apply, by the hook that may request it.

    episode_start: SKILLS (text added to the system context), STATE (initial shared state).
    pre_decision: MESSAGE (added to the model's context for this step only).
    pre_action: ALLOW, REWRITE (replace the action), VETO (tell the model why and ask again),
    FORCE (take this action, whatever the model said).
    post_feedback: HINT (appended to the observation), FORCE (next action, without the model),
    RECOVER (drop the conversation history and restart the context from this message).
    """

    SKILLS = "skills"
    STATE = "state"
    MESSAGE = "message"
    ALLOW = "allow"
    REWRITE = "rewrite"
    VETO = "veto"
    FORCE = "force"
    HINT = "hint"
    RECOVER = "recover"


ALLOWED_EFFECTS: dict[HookName, frozenset[EffectKind]] = {
    HookName.EPISODE_START: frozenset({EffectKind.SKILLS, EffectKind.STATE}),
    HookName.PRE_DECISION: frozenset({EffectKind.MESSAGE}),
    HookName.PRE_ACTION: frozenset(
        {EffectKind.ALLOW, EffectKind.REWRITE, EffectKind.VETO, EffectKind.FORCE}
    ),
    HookName.POST_FEEDBACK: frozenset({EffectKind.HINT, EffectKind.FORCE, EffectKind.RECOVER}),
}
