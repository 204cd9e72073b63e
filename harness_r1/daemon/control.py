"""Control commands in: the daemon reads the control topic like every agent does, accepts
exactly what agents accept, and brings its registry in line with what the fleet was told.

Why: operators may publish with `harness-r1 overlay ...` from another machine (another
registry), or another daemon worker may roll back; agents obey the signed command whatever
the registry says, so the registry must follow the topic, not the other way round. And it must
refuse what agents refuse, or the two drift apart: an old, validly signed rollback replayed
after a newer pin was once applied here (active -> rolled_back) while every agent ignored it.

Semantics (the same rules as `deploy/client.py`, through the shared `deploy/acceptance.py`):
- signature, known key, schema, validity window; an EXPIRED rollback is still accepted (its seq
  must be new), every other expired command is refused (`rejected_expired`);
- seq above the high-water mark of (control stream, target). The daemon follows every target
  (it keeps the registry of all pools), so it keeps one mark per target, as each agent keeps
  one for its own. The marks live in the registry's database (`overlay_marks`, stream
  `control` unless `mark_stream` names another), moved in the same transaction as the
  registry change: a restarted daemon or a new follower object never accepts an old command
  again.
  A seq at or below the mark is `rejected_replay` (a replay, or an older command that arrived
  after a newer one; agents refuse it too);
- an accepted command is applied by `deploy/control_effect.py` `record_control`, the same code the
  CLI runs right after publishing: rollback (revoked overlay rolled back; `--to ID` / `base`
  made the pool's overlay; without `--to`, the overlay the revoked one superseded), pin (the
  pinned overlay made active when the registry lacks that), pause/resume (an audit event).
  It is applied only if no newer command was applied to the registry already (the CLI may
  record a newer seq before the follower reads an older one): results `reconciled`,
  `already_applied`, `superseded`, `noted`, `unknown_overlay`. That second mark (stream
  `control.applied`, shared by every recorder) is what keeps the registry right; the first
  only mirrors what an agent would refuse.
- not followed: holds (a pause or pin parks new releases on agents; the registry has no such
  state), and the release topic (releases are recorded by whoever publishes them).

Results reported through `on_command(command, result)` (the `control_commands_seen` metric):
the ones above, `rejected_<reason>` for every refusal (reasons of `signing.Rejection`; the
command is "unknown" when its bytes could not be trusted), and `error` for a record whose
handling failed for a reason other than the database being away (counted, logged and skipped).
Every refusal and error is logged with the record's topic, partition and offset.

Failures: one record never stops the rest of the poll. A database error (locked, away,
a concurrent writer) stops the batch at that record: the records already handled are saved
as positions, the rest is kept and tried again first on the next `poll_once`, which raises the
error so the service loop backs off. A record that keeps failing with anything but a lost
connection is skipped after `max_attempts`. Retrying is safe: the mark and the change commit
together, so a command applied once is a replay the second time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import cast

import structlog
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from harness_r1.consumers import BroadcastReader, Record
from harness_r1.contracts import ControlCommand, ControlKind
from harness_r1.daemon.ingest import next_positions
from harness_r1.deploy import (
    Keyring,
    OverlayRegistry,
    Rejection,
    VerificationError,
    check_stream,
    open_envelope,
    open_message,
    record_control,
)

log = structlog.get_logger(__name__)

#: The registry mark that mirrors an agent's control high-water mark, per target.
FOLLOWED_STREAM = "control"
#: Attempts at a record that fails with a database error other than a lost connection.
MAX_ATTEMPTS = 5
#: Results of a command the daemon accepted and acted on (or found already done): what
#: `on_followed` counts; a refused one (`out_of_range`, `error`) is not followed.
FOLLOWED_RESULTS = ("reconciled", "already_applied", "superseded", "noted", "unknown_overlay")
#: Bounded labels for a command's free-text actor: the daemon's own actors by name, anyone
#: else (a person, a script) as an operator.
ACTORS = ("operator", "live_guard", "daemon")


def actor_label(actor: str) -> str:
    if actor.startswith("live_guard"):
        return "live_guard"
    return "daemon" if actor == "daemon" else "operator"


#: Every `command` and `result` label on_command reports: bounded sets (a metric can start
#: each series at zero).
COMMANDS = ("unknown", *(kind.value for kind in ControlKind))
RESULTS = (
    "reconciled",
    "already_applied",
    "superseded",
    "noted",
    "unknown_overlay",
    "out_of_range",  # skip_offset: not this daemon's topic, or past the partition's end
    "error",
    *(f"rejected_{reason.value}" for reason in Rejection),
)


class ControlFollower:
    """Positions are kept in the state store (group `positions_group`) so a restart does not
    read the whole topic again; correctness does not depend on them (the seq marks refuse
    anything already handled)."""

    # Why this size: keyword options of the control follower (topics, keys, clocks, callbacks):
    # each has a default
    def __init__(
        self,
        reader: BroadcastReader,
        keyring: Keyring,
        registry: OverlayRegistry,
        on_command: Callable[[str, str], None] | None = None,  # (command, result)
        save_positions: Callable[[dict[tuple[str, int], int]], None] | None = None,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_clock_skew: timedelta = timedelta(seconds=30),
        max_attempts: int = MAX_ATTEMPTS,
        mark_stream: str = FOLLOWED_STREAM,
        on_skip: Callable[[ControlCommand], str] | None = None,
        on_followed: Callable[[str, str], None] | None = None,  # (command, actor label)
    ) -> None:
        """on_followed sees every command accepted (not refused, not failed) with the bounded
        label of its actor (`actor_label`): the daemon's count of what operators and the live
        guard did, whoever published it.

        mark_stream names this follower's seq marks in the registry. Daemons that share one
        database and each follow the topic should each pass a name of their own that survives
        a restart (e.g. `control:<group id>`): with one shared mark, the second daemon to read
        a command counts it as a replay (the registry is right either way)."""
        self.reader = reader
        self._save_positions = save_positions
        self.keyring = keyring
        self.registry = registry
        self._on_command = on_command
        self._now = now
        self._skew = max_clock_skew
        self._max_attempts = max_attempts
        self.mark_stream = mark_stream
        self._on_skip = on_skip
        self._on_followed = on_followed
        self._pending: list[Record] = []  # a batch cut short by a database error
        self._attempts = 0  # failed attempts at self._pending[0]
        self.seen = 0

    def poll_once(self, timeout_ms: int = 200) -> int:
        """Handle the records kept from a failed batch, or read new ones; returns how many
        were handled. Raises only a database error (after saving what was done)."""
        batch = self._pending or self.reader.poll(timeout_ms)
        self._pending = []
        done: list[Record] = []
        try:
            for index, record in enumerate(batch):
                try:
                    self.handle(record)
                except DBAPIError as err:
                    if self._give_up(record, err):
                        done.append(record)
                        continue
                    self._pending = batch[index:]
                    raise
                self._attempts = 0
                done.append(record)
        finally:
            self.seen += len(done)
            if done and self._save_positions is not None:
                self._save_positions(next_positions(done))
        return len(done)

    def handle(self, record: Record) -> str:
        """Verify one record and apply it; returns the result it was counted under. Raises
        only a database error (DBAPIError); anything else is counted as `error`."""
        try:
            command = self._verify(record)
        except VerificationError as err:
            return self._refuse(record, self._name(record, err), err.reason.value, err.detail)
        try:
            result = self.apply(command)
        except DBAPIError:
            raise
        except Exception as err:  # noqa: BLE001 - one command must not stop the follower
            log.exception(
                "control_command_failed", **_where(record), seq=command.seq, error=str(err)[:300]
            )
            self._report(command.command.value, "error")
            return "error"
        if result == "rejected_replay":
            mark = self.registry.mark(command.target, self.mark_stream)
            detail = f"control seq {command.seq} <= high-water mark {mark}"
            return self._refuse(record, command.command.value, Rejection.REPLAY.value, detail)
        log.info(
            "control_command_followed",
            command=command.command.value,
            target=command.target,
            seq=command.seq,
            result=result,
            **_where(record),
        )
        self._report(command.command.value, result)
        if self._on_followed is not None and result in FOLLOWED_RESULTS:
            self._on_followed(command.command.value, actor_label(command.actor))
        return result

    def apply(self, command: ControlCommand) -> str:
        """In one registry transaction: advance the (control, target) mark and, if it moved,
        record the command's effect. "rejected_replay" when the mark did not move.

        skip_offset acts on the state store, not the registry, so it cannot share the
        registry's transaction: it is refused as a replay if the mark already holds its seq,
        applied (`on_skip`: a skip is forward-only, so applying it twice is harmless; a reset
        applied twice after a crash reads the same records again, dropped as duplicates), and
        only then does the mark move. A crash in between applies it again; never loses it."""
        if command.command in (ControlKind.SKIP_OFFSET, ControlKind.RESET_OFFSET):
            return self._skip(command)
        with self.registry.transaction():
            if not self.registry.advance_mark(command.target, self.mark_stream, command.seq):
                return "rejected_replay"
            return record_control(self.registry, command, recorder="control_follower")

    def _skip(self, command: ControlCommand) -> str:
        if self.registry.mark(command.target, self.mark_stream) >= command.seq:
            return "rejected_replay"
        result = "noted" if self._on_skip is None else self._on_skip(command)
        self.registry.advance_mark(command.target, self.mark_stream, command.seq)
        return result

    def _verify(self, record: Record) -> ControlCommand:
        payload = open_message(
            record.value, self.keyring, "control", now=self._now(), max_clock_skew=self._skew
        )
        check_stream(payload, "control")
        return cast(ControlCommand, payload)  # check_stream refused anything else

    def _name(self, record: Record, err: VerificationError) -> str:
        """The command's name for the metric when its signature held (an expired pin):
        "unknown" when its bytes cannot be trusted."""
        if err.reason not in (Rejection.EXPIRED, Rejection.NOT_YET_VALID):
            return "unknown"
        try:
            payload = open_envelope(record.value, self.keyring, check_validity=False)
        except VerificationError:
            return "unknown"
        return payload.command.value if isinstance(payload, ControlCommand) else "unknown"

    def _refuse(self, record: Record, command: str, reason: str, detail: str) -> str:
        result = f"rejected_{reason}"
        log.warning(
            "control_command_rejected",
            command=command,
            reason=reason,
            detail=detail[:300],
            **_where(record),
        )
        self._report(command, result)
        return result

    def _give_up(self, record: Record, err: DBAPIError) -> bool:
        """True when a record that failed on the database is to be skipped: never while the
        connection is lost (the database is away: nothing else could progress either), after
        max_attempts for anything else (a constraint the record keeps hitting)."""
        self._attempts += 1
        log.error(
            "control_command_db_error",
            attempt=self._attempts,
            error=f"{type(err).__name__}: {err}"[:300],
            **_where(record),
        )
        lost = isinstance(err, OperationalError | InterfaceError) or err.connection_invalidated
        if lost or self._attempts < self._max_attempts:
            return False
        self._attempts = 0
        self._report("unknown", "error")
        return True

    def _report(self, command: str, result: str) -> None:
        if self._on_command is not None:
            self._on_command(command, result)


def _where(record: Record) -> dict[str, object]:
    return {"topic": record.topic, "partition": record.partition, "offset": record.offset}
