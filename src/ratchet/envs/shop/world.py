"""One session's shop: its private database and what the written policy needs to remember.

A :class:`World` records which customers have confirmed their identity, which records its
reads have shown, and every violation attempted. Tools refuse an action the policy forbids
with a ``ToolError`` that starts with ``"Policy violation:"`` (:meth:`World.refuse`) and the
world keeps it, so the verifier can fail the episode even if the agent later recovers.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from ratchet.core.tool import ToolError
from ratchet.envs.shop.db import fresh_copy
from ratchet.envs.shop.values import order_key

VIOLATION = "Policy violation: "


@dataclass
class World:
    """One session's shop: a private database copy and the policy's memory.

    Attributes:
        db_seed: Which base store this copies.
        conn: The session's own in-memory database.
        confirmed: Customers whose identity has been confirmed.
        shown: What the session's reads have shown (:meth:`show`), so the verifier credits an
            answer only with facts the agent looked up, never with a lucky guess.
        violations: Every policy violation attempted, in order.
    """

    db_seed: int
    conn: sqlite3.Connection
    confirmed: set[str] = field(default_factory=set)
    shown: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, db_seed: int) -> World:
        """Start a world on a fresh copy of the base store for ``db_seed``."""
        return cls(db_seed, fresh_copy(db_seed))

    def close(self) -> None:
        """Release the database."""
        self.conn.close()

    def show(self, kind: str, key: str) -> None:
        """Record that a read showed ``kind`` of ``key`` (``"order"``, ``"#W1234567"``)."""
        self.shown.add(f"{kind}:{key}")

    def refuse(self, rule: str) -> ToolError:
        """Record a policy violation and return the error that reports it to the agent."""
        self.violations.append(rule)
        return ToolError(VIOLATION + rule)

    def one(self, sql: str, *args: object) -> sqlite3.Row | None:
        """Return the first row of a query, or ``None``."""
        cursor = self.conn.execute(sql, args)
        cursor.row_factory = sqlite3.Row
        row: sqlite3.Row | None = cursor.fetchone()
        return row

    def rows(self, sql: str, *args: object) -> list[sqlite3.Row]:
        """Return all rows of a query."""
        cursor = self.conn.execute(sql, args)
        cursor.row_factory = sqlite3.Row
        return list(cursor.fetchall())

    def order(self, order_id: str) -> sqlite3.Row:
        """Return an order's row, whatever the spelling of its id.

        Raises:
            ToolError: If there is no such order.
        """
        order = self.one("SELECT * FROM orders WHERE id = ?", order_key(order_id))
        if order is None:
            raise ToolError(f"no order {order_id!r}; order ids look like '#W1234567'")
        return order
