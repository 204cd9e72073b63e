"""Service wiring: settings, CLI (and, later, the state store, scheduler, metrics). Nothing imports it."""
