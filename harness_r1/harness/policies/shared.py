"""One frozen target serving several agents at once, as an inference server does.

Deployed agents each run their own harness runtime in their own thread; on one CPU model,
their calls one after another would each decode a batch of one or two rows. `SharedPolicy`
gathers the calls that arrive together (all active callers, or whatever arrived within
`window_s`) into one `generate` on the wrapped policy, whose lockstep decode then serves every
row at once, and hands each caller its own answers in order. A failure of the batched call is
raised in every caller of that batch. `stop()` ends it for every caller at once: a waiting or
later call raises `PolicyStopped` (what lets a fleet of agent threads end within one model call
when the demo is interrupted, instead of playing their share of the phase to the end).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness_r1.models import Generation, GenerationRequest, Policy


class PolicyStopped(RuntimeError):
    """The shared policy was stopped: no more calls are served."""


@dataclass
class _Ticket:
    requests: list[GenerationRequest]
    result: list[Generation] | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass
class _State:
    waiting: list[_Ticket] = field(default_factory=list)
    busy: bool = False
    callers: int = 1
    stopped: bool = False


class SharedPolicy:
    """`Policy` over `inner` for `callers` concurrent agents (set it per phase with
    `callers(n)` and `leave()` as agents finish, so nobody waits for an agent that is done)."""

    def __init__(self, inner: Policy, window_s: float = 0.05) -> None:
        self.inner = inner
        self.window_s = window_s
        self.model_id = inner.model_id
        self.version = inner.version
        self.max_batch = inner.max_batch
        self._cond = threading.Condition()
        self._state = _State()
        self.batches = 0  # calls made on `inner` (for tests and benchmarks)

    def callers(self, n: int) -> None:
        with self._cond:
            self._state.callers = max(1, n)
            self._cond.notify_all()

    def leave(self) -> None:
        with self._cond:
            self._state.callers = max(1, self._state.callers - 1)
            self._cond.notify_all()

    def stop(self) -> None:
        """Serve no more calls: waiting and later callers raise `PolicyStopped`, those of a
        batch already in the model too (its leader finishes the call; the answers are
        dropped)."""
        with self._cond:
            self._state.stopped = True
            self._cond.notify_all()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        ticket = _Ticket(list(requests))
        batch = self._join(ticket)
        if batch is not None:
            self._serve(batch)
        if ticket.error is not None:
            raise ticket.error
        assert ticket.result is not None
        return ticket.result

    def _join(self, ticket: _Ticket) -> list[_Ticket] | None:
        """Wait for `ticket` to be served, or take the lead of the next batch (returned)."""
        state = self._state
        deadline = time.monotonic() + self.window_s
        with self._cond:
            state.waiting.append(ticket)
            self._cond.notify_all()
            while not ticket.done:
                if state.stopped:
                    if ticket in state.waiting:
                        state.waiting.remove(ticket)
                    raise PolicyStopped("the shared policy was stopped")
                left = deadline - time.monotonic()
                if not state.busy and (len(state.waiting) >= state.callers or left <= 0):
                    batch, state.waiting = state.waiting, []
                    state.busy = True
                    return batch
                self._cond.wait(timeout=left if left > 0 else None)
            return None

    def _serve(self, batch: list[_Ticket]) -> None:
        flat = [r for t in batch for r in t.requests]
        try:
            out = self.inner.generate(flat)
            at = 0
            for t in batch:
                t.result, at = out[at : at + len(t.requests)], at + len(t.requests)
        except BaseException as err:  # noqa: BLE001 - handed to every caller of the batch
            for t in batch:
                t.error = err
        finally:
            with self._cond:
                for t in batch:
                    t.done = True
                self._state.busy = False
                self.batches += 1
                self._cond.notify_all()
