"""harness-r1: improve deployed LLM agents by editing their harness, proven on the frozen target.

Subpackages, in the direction dependencies point:
contracts -> models -> envs -> harness -> sandbox -> trainer -> deploy -> daemon -> cli
(README "Layout").
exports.py: a package's public names, loaded on first use.
"""

__version__ = "0.1.0"
