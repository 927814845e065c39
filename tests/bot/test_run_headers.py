"""The run's message is updated from two threads at once (the decision's, after it handed the run
to a worker, and the worker's): whichever comes last, it never shows an older run over a newer."""

from __future__ import annotations

import dataclasses

from bot_fakes import make_approval, make_run

from signoff.bot.slack.run_headers import RunHeaders

THREAD = ("C0RUNS", "1700000000.000001")


def test_a_decision_drawn_from_the_run_before_it_went_on_does_not_redraw_the_ended_run() -> None:
    updates: list[str] = []
    headers = RunHeaders(lambda channel, ts, message: updates.append(message.text))
    waiting = make_run(status="awaiting_approval", version=3)
    approved = make_approval(status="approved", asked_with={k: v for k, v in waiting.state.items() if k != "history"})
    finished = make_run(status="done", version=6, state={"status": "done", "answer": "Refunded order 42."})
    alone: list[str] = []
    RunHeaders(lambda channel, ts, message: alone.append(message.text)).going_on(waiting, THREAD, [approved])
    assert len(alone) == 1, "on its own, the decision shows the run working"
    headers.ended(finished, THREAD)  # the worker ran the tool and ended the run first
    headers.going_on(waiting, THREAD, [approved])  # then the decision's thread shows the card decided
    assert len(updates) == 1 and "done" in updates[0]


def test_a_newer_run_is_drawn_and_the_same_one_not_twice() -> None:
    updates: list[str] = []
    headers = RunHeaders(lambda channel, ts, message: updates.append(message.text))
    running = make_run(status="running", version=4)
    headers.working(running, THREAD)
    headers.working(dataclasses.replace(running, version=5), THREAD)  # still working: nothing new to show
    headers.ended(make_run(status="done", version=6, state={"status": "done", "answer": "ok"}), THREAD)
    assert len(updates) == 2
