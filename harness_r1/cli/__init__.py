"""The `harness-r1` command line: one module per command group (`app.py` registers them under
help panels), `settings.py` (the one settings loader every command uses) and `jobs/` (what the
heavier commands run).

May import every other package of harness_r1; nothing in harness_r1 imports it. Command modules
import only typer, rich and `cli.settings` at the top, and everything else inside the command,
so `harness-r1 --help` starts fast.

A command function has one parameter per option (typer reads the signature), so the commands
are the written exception to "no function over 8 parameters": each builds a request object
(`jobs/*Request`, `jobs/target.TargetSpec`) and hands that on.
"""
