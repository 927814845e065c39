"""The approval API's keys in SQL (`api_keys.ApiKeys`), in the store's database, on its clock."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from signoff.runtime.adapters.sql_approvals import SqlTransactions
from signoff.runtime.adapters.tables import api_keys
from signoff.runtime.api_keys import ApiKey, KeyExists

LAST_USE_EVERY_S = 60
"""A key's last use is written at most this often: not one write for every request it makes."""


class SqlApiKeys(SqlTransactions):
    def create_key(self, key: ApiKey, secret_hash: str, callback_secret: str) -> None:
        try:
            with self._tx() as conn:
                conn.execute(insert(api_keys).values(
                    name=key.name, secret_hash=secret_hash, callback_secret=callback_secret,
                    channel=key.channel, other_channels=json.dumps(list(key.other_channels)),
                    tools=json.dumps(list(key.tools)),
                    requester=key.requester, created_at=self._now(conn)))
        except IntegrityError:
            raise KeyExists(f"a key named {key.name} exists already; names are never reused") from None

    def keys(self) -> list[ApiKey]:
        with self.engine.connect() as conn:
            return [_key(row) for row in conn.execute(select(api_keys).order_by(api_keys.c.name))]

    def revoke_key(self, name: str) -> ApiKey | None:
        with self._tx() as conn:
            conn.execute(update(api_keys).where(api_keys.c.name == name, api_keys.c.revoked_at.is_(None))
                         .values(revoked_at=self._now(conn)))
            row = conn.execute(select(api_keys).where(api_keys.c.name == name)).first()
        return _key(row) if row is not None else None

    def key_for(self, secret_hash: str) -> ApiKey | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(api_keys).where(api_keys.c.secret_hash == secret_hash)).first()
            now = self._now(conn)
        if row is None:
            return None
        key = _key(row)
        if key.live and (key.last_used_at is None or (now - key.last_used_at).total_seconds() > LAST_USE_EVERY_S):
            with self._tx() as conn:
                conn.execute(update(api_keys).where(api_keys.c.name == key.name).values(last_used_at=now))
        return key


    def callback_secret(self, name: str) -> str | None:
        with self.engine.connect() as conn:
            found = conn.execute(select(api_keys.c.callback_secret).where(api_keys.c.name == name)).scalar()
        return str(found) if found is not None else None


def _key(row: Any) -> ApiKey:
    return ApiKey(name=row.name, channel=row.channel, other_channels=tuple(json.loads(row.other_channels)),
                  tools=tuple(json.loads(row.tools)), requester=row.requester,
                  created_at=row.created_at, revoked_at=row.revoked_at, last_used_at=row.last_used_at)
