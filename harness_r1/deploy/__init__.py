"""Deploy: overlay registry, signing, the agent-side overlay client, rollback, live guard
(issue 5; empty so far)."""
