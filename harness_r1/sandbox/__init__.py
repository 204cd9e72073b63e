"""The sandbox: model-written patches are hostile. parse.py (engineer output -> Patch),
static.py (AST rules with stable codes), hooklib.py (what a hook may use), executor.py +
worker_main.py + isolation.py (the isolated warm worker), canary.py (paired re-runs of the
frozen target), gate.py (promotion decisions), patchfile.py + reference_patches/."""
