"""`signoff grants list` and `signoff grants revoke` as subprocesses: a grant made at the keyboard
is listed, revoked once (a second revoke says by whom it already was), and the next call it
covered is asked about again."""

from __future__ import annotations

import json
import re

EMAIL = {"tool": "send_email", "args": {"to": "ada@example.com", "subject": "Your refund",
                                        "body": "Dear Ada, your refund is on its way."}}
GRANTING = """\
rules:
  - name: mail
    tool: send_email
    approvers: ["*"]
    grant: {for: 30m, same: [to], scope: requester}
"""


def script(signoff) -> str:
    path = signoff.cwd / "script.json"
    path.write_text(json.dumps([EMAIL, {"final": "done"}]))
    return f"scripted:{path}"


def test_a_grant_is_listed_revoked_once_and_its_next_call_is_asked_about(signoff):
    (signoff.cwd / "policy.yaml").write_text(GRANTING)
    run = ("run", "write to Ada", "--model", script(signoff), "--policy", "policy.yaml", "--user", "cli:ada")
    assert signoff.here(*run, answers="s\n").code == 0
    assert signoff.here(*run).out.count("+-- Approval needed") == 0  # covered by the grant

    listed = signoff("grants", "list")
    assert listed.code == 0, listed.err
    [header, row] = listed.lines
    assert header.split() == ["ID", "TOOL", "MADE", "BY", "ENDS", "USES", "STATE", "COVERS"]
    [grant_id] = re.findall(r"grt_\S+", row)
    assert 'send_email' in row and 'runs of cli:ada {"to": "ada@example.com"}' in row
    assert row.split()[5:7] == ["1", "live"]

    revoked = signoff("grants", "revoke", grant_id, "--user", "cli:lead")
    assert (revoked.code, revoked.out) == (0, f"grant {grant_id} is revoked: its calls are asked about again\n")
    again = signoff("grants", "revoke", grant_id, "--user", "cli:ops")
    assert again.out == f"grant {grant_id} was already revoked by cli:lead; nothing changed\n"
    assert signoff("grants", "revoke", "grt_nothing").code == 1
    assert signoff("grants", "list").out == "no grants in force\n"
    assert "  revoked by cli:lead  " in signoff("grants", "list", "--all").lines[1]

    asked = signoff.here(*run, answers="d\n")
    assert asked.out.count("+-- Approval needed") == 1
