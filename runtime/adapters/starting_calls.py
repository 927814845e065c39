"""A call about to start through a store's execution ledger, as both stores write it: what its
ledger row and, for a call nobody was asked about, its signed receipt say."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from signoff.runtime.receipts import SigningKey, Unasked, start_receipt


@dataclass(frozen=True)
class StartingCall:
    """One call starting `now` in run `run_id` (asked for by `requester`), under its key."""

    run_id: str
    requester: str
    tool: str
    args: dict[str, Any]
    key: str
    digest: str
    """Of the call and the preview it was approved with (`state.call_digest`)."""
    now: datetime
    preview: str | None
    policy: str | None
    signer: SigningKey | None

    def receipt(self, decision: Unasked, rule: str | None, grant_id: str | None = None) -> dict[str, Any] | None:
        """The signed receipt of the call starting unasked, as `rule` (or the grant `grant_id`)
        let it; None when no key signs receipts."""
        if self.signer is None:
            return None
        return start_receipt(decision, self.signer, run_id=self.run_id, requester=self.requester, tool=self.tool,
                             args=self.args, call_key=self.key, digest=self.digest, now=self.now, rule=rule,
                             grant_id=grant_id, preview=self.preview, policy=self.policy)
