"""What the heavier commands run (canary, eval, engineer evaluation, data status and fetch,
patch check): plain functions over request objects, testable without typer. Imported by the
command modules inside their commands only."""
