"""The `harness-r1` command line: one module per command group (`app.py` registers them under
help panels), `settings.py` (the one settings loader every command uses) and `jobs/` (what the
heavier commands run).

May import every other package of harness_r1; nothing in harness_r1 imports it. Command modules
import only typer, rich and `cli.settings` at the top, and everything else inside the command,
so `harness-r1 --help` starts fast.

A command function has one parameter per option (typer reads the signature), so the commands
are the written exception to "no function over 8 parameters": each builds a request object
(`jobs/*Request`, `jobs/target.TargetSpec`) and hands that on.

Modules:
- app.py: Harness-R1: improve deployed LLM agents by patching their harness, judged by real
  re-runs
- config.py: `harness-r1 config show|reference`: the settings in effect, after every source has
  been merged; and the reference of every setting ...
- data.py: `harness-r1 data|schemas|patch|packet`: files in, reports out; nothing runs a model
- deadletter.py: `harness-r1 deadletter list|redrive`: what an operator does with the
  dead-letter topic
- env.py: `harness-r1 env list|check`: the environments this installation runs, and whether one
  keeps the contract
- engineer.py: `harness-r1 engineer propose|evaluate`: the harness engineer's proposals, and its
  score on held-out packets
- group.py: One way to make a command group, so every group's help renders alike: paragraphs
  reflowed (markdown), `code` for the example each ...
- ingest.py: `harness-r1 ingest skip|reset`: move the daemon's ingest past records it cannot get
  past, or set it back where the broker reset a ...
- measure.py: `harness-r1 eval|canary`: the frozen target on real tasks, under the base harness
  or paired with candidate patches
- options.py: Options that several commands share and whose defaults are the settings' (one
  source of defaults: the domain configs -> the settings -> ...
- overlay.py: `harness-r1 overlay ...` and `harness-r1 keys ...`: the operator's handles on
  deploy
- publish.py: `harness-r1 publish FILE.jsonl`: produce a file of trajectories to the trajectory
  topic
- run.py: `harness-r1 run|demo`: the daemon against real services, or the whole loop embedded
- settings.py: The settings every CLI command reads: loaded once per invocation, from the
  command's own `--config`, else the root `harness-r1 --config ...
- topics.py: `harness-r1 topics create|describe`: provision the deployment's topics with the
  recommended partitions, replication and configs ...
- train.py: `harness-r1 train coldstart|sft|grpo online|replay`: CLI options ->
  harness_r1.trainer
- jobs/: What the heavier commands run (canary, eval, engineer evaluation, data status and
  fetch, patch check): plain functions over request ...
"""

from harness_r1.cli.train import PAUSED_EXIT, PAUSED_FILE

__all__ = [
    "PAUSED_EXIT",
    "PAUSED_FILE",
]
