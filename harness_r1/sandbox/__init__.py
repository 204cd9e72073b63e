"""The sandbox: model-written patches are hostile. parse.py (engineer output -> Patch),
static.py (AST rules with stable codes), hooklib.py (what a hook may use), executor.py +
worker_main.py + isolation.py (the isolated warm worker), canary.py (paired re-runs of the
frozen target), gate.py (promotion decisions), patchfile.py + reference_patches/.

Modules:
- canary.py: The canary: re-run the frozen target on the same tasks and seeds with and without a
  patch
- canary_factory.py: The one way to assemble a canary: the frozen target's runtime, isolated
  hook workers for the candidates, the intake's static checks and ...
- compose.py: Fold an overlay chain (the incumbent's links plus a new one) into one composed
  Patch
- executor.py: IsolatedHooks: the HookSet that runs a patch's hooks in a warm, isolated worker
  process
- gate.py: The promotion gate: a patch is promoted only on evidence, never by default
- gated.py: A candidate group through the canary and the promotion gate in one call
- hooklib.py: What a hook can see besides its arguments: the whitelisted builtins, `re`, `math`,
  `similarity` and `closest`
- intake.py: Patch intake: the one place a patch is judged fit to run, and the one wording of a
  refusal
- isolation.py: Process isolation layers, applied inside the hook worker before it runs any hook
  code
- metrics.py: Prometheus metrics of the sandbox, built against a registry the caller passes in
  (the daemon owns the registry and exposes it; tests ...
- parse.py: Parse an engineer model's output into the Patch contract
- patchfile.py: Patch files on disk: a Patch as JSON, engineer output, or the sectioned `.patch`
  format
- static.py: Static checks of a Patch: the first (and weakest) layer of the sandbox
- worker_main.py: The hook worker: a warm child process that runs model-written hooks behind
  isolation layers
"""
