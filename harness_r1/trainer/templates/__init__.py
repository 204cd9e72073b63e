"""The template teacher's library of parameterised hook templates (one module per env plus the
env-generic ones). `TEMPLATES` maps each name to its Template."""

from __future__ import annotations

from harness_r1.trainer.templates import alfworld, dbbench, generic, webshop
from harness_r1.trainer.templates.base import (
    FEATURES,
    ChoiceParam,
    Features,
    FloatParam,
    IntParam,
    Param,
    RenderContext,
    Template,
    compose_rules,
    lit,
    packet_features,
)

TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (*generic.TEMPLATES, *alfworld.TEMPLATES, *dbbench.TEMPLATES, *webshop.TEMPLATES)
}


def templates_for(env: str) -> list[Template]:
    """Templates that apply to an env, in a stable (name) order."""
    return sorted((t for t in TEMPLATES.values() if t.applies_to(env)), key=lambda t: t.name)


__all__ = [
    "ChoiceParam",
    "FEATURES",
    "Features",
    "FloatParam",
    "IntParam",
    "Param",
    "RenderContext",
    "TEMPLATES",
    "Template",
    "compose_rules",
    "lit",
    "packet_features",
    "templates_for",
]
