"""Someone with SQL access erases what runs did, after several ran to their end through a real
`signoff serve`: a run's whole trail with its count zeroed, a run's newest events with its count
lowered, and the same cut with every hash after it recomputed.

`signoff audit verify` names the run of each (exit 1); the rehashed log passes on its own and
fails against the head `verify` printed before it (`--since-head`). The rows are put back after
each attack, and the log verifies through that head again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, delete, func, insert, select, text

from scenarios.drive import Driver, has_ended
from scenarios.outcome import Outcome, observed
from scenarios.world import ROOT, World, wait_until
from signoff.runtime.adapters.tables import audit_head, events, run_chain, runs
from signoff.runtime.audit import GENESIS, chain_hash

SCRIPT = [{"tool": "send_note", "args": {"to": "ops@example.com", "text": "Rotated the key."}},
          {"final": "Key rotated and ops told."}]
RUNS = 3
HEAD = re.compile(r"the chain of runs ends at #\d+ ([0-9a-f]{64})")


def erase_trail(engine: Engine, run_id: str) -> None:
    """The issue's attack: the run's events gone, and its row counting none."""
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM events WHERE run_id = :r"), {"r": run_id})
        conn.execute(text("UPDATE runs SET event_count = 0 WHERE run_id = :r"), {"r": run_id})


def cut_back(engine: Engine, run_id: str, keep: int) -> None:
    """The run's events after `keep` gone, and its row counting `keep`: no hash computed."""
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM events WHERE run_id = :r AND seq > :k"), {"r": run_id, "k": keep})
        conn.execute(text("UPDATE runs SET event_count = :k WHERE run_id = :r"), {"r": run_id, "k": keep})


def rehash_chain(engine: Engine) -> None:
    """Make the chain of runs agree with the events as they now are, as someone who read the audit guide
    would: seals past a run's last event dropped, every link after renumbered and hashed again."""
    with engine.begin() as conn:
        lasts = dict(conn.execute(select(events.c.run_id, func.max(events.c.seq)).group_by(events.c.run_id)).all())
        kept = [link for link in conn.execute(select(run_chain).order_by(run_chain.c.position)).all()
                if link.seq <= lasts.get(link.run_id, 0)]
        conn.execute(delete(run_chain))
        position, prev = 0, GENESIS
        for link in kept:
            position += 1
            digest = chain_hash(position, link.run_id, link.seq, link.event_hash, prev)
            conn.execute(insert(run_chain).values(position=position, run_id=link.run_id, seq=link.seq,
                                                  event_hash=link.event_hash, prev_hash=prev, hash=digest))
            prev = digest
        conn.execute(audit_head.update().values(links=position, hash=prev))


@contextmanager
def put_back(engine: Engine) -> Iterator[None]:
    """Undo whatever the block does to the audit log's tables (the invariants read the runs after)."""
    tables = (events, runs, run_chain, audit_head)
    with engine.connect() as conn:
        saved = {table.name: [dict(row._mapping) for row in conn.execute(select(table))] for table in tables}
    try:
        yield
    finally:
        with engine.begin() as conn:
            for table in reversed(tables):
                conn.execute(delete(table))
            for table in tables:
                if saved[table.name]:
                    conn.execute(insert(table), saved[table.name])


def verify(world: World, *flags: str) -> tuple[int, str]:
    """`signoff audit verify` as an operator runs it: its exit status and what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "SLACK_"))}
    env.update(SIGNOFF_DATABASE_URL=world.db.url("audit"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "signoff.bot.cli", "audit", "verify", *flags], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def run_erasure(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"hostile/audit-erasure/{kind}", "hostile", runs=RUNS)
    with observed(outcome, lambda: World(kind, SCRIPT)) as world:
        serve = world.start()
        driver = Driver(world, lambda: serve)
        run_ids = [driver.start(f"Rotate key {n}") for n in range(RUNS)]
        outcome.expect(driver.settle(run_ids, 60), "the runs did not all end")
        wait_until(lambda: all(has_ended(world, r, frozenset({"done"})) for r in run_ids), 20, what="every run done")
        serve.stop()
        code, said = verify(world)
        head = HEAD.search(said)
        if not outcome.expect(code == 0 and head, f"the untouched log did not verify with a head: {said!r}"):
            return outcome
        _attacks(world, outcome, run_ids, head.group(1) if head else "")
    return outcome


def _attacks(world: World, outcome: Outcome, run_ids: list[str], head: str) -> None:
    engine = world.db.engine
    attacks: list[tuple[str, Any, list[str], tuple[str, ...]]] = [
        ("a run's trail erased, its count zeroed", lambda: erase_trail(engine, run_ids[0]),
         [f"run {run_ids[0]}, event 1: missing"], ()),
        ("a run's newest events cut, its count lowered", lambda: cut_back(engine, run_ids[1], 3),
         [f"run {run_ids[1]}, event 4: missing"], ()),
        ("a run's newest events cut and the chain rehashed, against the head kept",
         lambda: (cut_back(engine, run_ids[2], 3), rehash_chain(engine)), ["rewritten", head], ("--since-head", head)),
    ]
    for label, attack, named, flags in attacks:
        outcome.hostile += 1
        with put_back(engine):
            attack()
            code, said = verify(world, *flags)
            outcome.expect(code == 1 and all(words in said for words in named),
                           f"{label}: `signoff audit verify` said {said!r} (exit {code})")
            if flags:
                plain, said = verify(world)
                outcome.notes.append(f"{label}: without the head, verify exits {plain} (a consistent rewrite)")
    code, said = verify(world, "--since-head", head)
    outcome.expect(code == 0, f"the log put back does not verify through the head kept: {said!r}")
