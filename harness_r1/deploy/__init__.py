"""Deploy: what decides which overlay runs in production agents, and how it gets there.

registry.py (overlays, lineage, lifecycle, audit events; SQLAlchemy), signing.py (Ed25519
envelopes, keys), publisher.py (signed releases and control commands, registry kept in step),
client.py + state.py (the agent-side client: verify, swap at episode boundaries, survive the
broker being away), guard.py + guard_loop.py (the live guard's sequential test and its
promotion or rollback)."""
