"""A lending library in SQLite with eight typed tools: what `ratchet forge` turns into an env.

Nothing here is a task, a verifier or an oracle: only a schema, seed data and the tools a
library's staff would use. `ratchet forge` walks the tools at random to make the tasks ("Lend
book B07 to member M03", "Which shelf is book B12 on?"), replays each walk to verify it, and
checks the env before writing it:

    ratchet forge examples/library_forge.py:source --out forged/library
    ratchet check forged/library/env.py:env
    ratchet improve forged/library/env.py:env --max-difficulty 2

Book and member ids have a fixed shape (a pattern in the tools' types, so constrained decoding
copies real ones); shelves are the library's vocabulary, the same in every world. No tool's
type lists what one library holds.
"""

import json
import random
import sqlite3
from typing import Annotated, Literal

from pydantic import Field

from ratchet import ToolError
from ratchet.forge import sqlite_source

BookId = Annotated[str, Field(pattern=r"^B\d{2}$")]
MemberId = Annotated[str, Field(pattern=r"^M\d{2}$")]
Shelf = Literal["fiction", "history", "science", "poetry"]
SHELVES: tuple[Shelf, ...] = ("fiction", "history", "science", "poetry")

SCHEMA = """
CREATE TABLE books (id TEXT PRIMARY KEY, title TEXT NOT NULL, shelf TEXT NOT NULL);
CREATE TABLE members (id TEXT PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE loans (book_id TEXT PRIMARY KEY REFERENCES books, member_id TEXT NOT NULL);
"""
BOOKS = 30
MEMBERS = 8
WORDS = ["river", "glass", "winter", "orchard", "lantern", "harbour", "silver", "garden"]
NAMES = ["Ada", "Bruno", "Chen", "Dina", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jun"]


def seed(rng: random.Random, db: sqlite3.Connection) -> None:
    """Fill one library: 30 books on four shelves, 8 members, about a third of the books lent."""
    members = [f"M{i:02d}" for i in range(1, MEMBERS + 1)]
    db.executemany("INSERT INTO members VALUES (?, ?)", [(m, rng.choice(NAMES)) for m in members])
    for i in range(1, BOOKS + 1):
        title = f"The {rng.choice(WORDS).title()} {rng.choice(WORDS).title()}"
        db.execute("INSERT INTO books VALUES (?, ?, ?)", (f"B{i:02d}", title, rng.choice(SHELVES)))
        if rng.random() < 0.35:
            db.execute("INSERT INTO loans VALUES (?, ?)", (f"B{i:02d}", rng.choice(members)))


def tools(db: sqlite3.Connection) -> list:
    """The library's tools over one session's database."""

    def book(book_id: str) -> tuple[str, str]:
        row = db.execute("SELECT id, shelf FROM books WHERE id = ?", (book_id,)).fetchone()
        if row is None:
            raise ToolError(f"there is no book {book_id}")
        return row

    def borrower(book_id: str) -> str | None:
        row = db.execute("SELECT member_id FROM loans WHERE book_id = ?", (book_id,)).fetchone()
        return row[0] if row else None

    def member(member_id: str) -> None:
        if db.execute("SELECT 1 FROM members WHERE id = ?", (member_id,)).fetchone() is None:
            raise ToolError(f"there is no member {member_id}")

    def book_status(book_id: BookId) -> str:
        """Say whether a book is available or on loan.

        Args:
            book_id: The book's id, e.g. B07.
        """
        book(book_id)
        return "on loan" if borrower(book_id) else "available"

    def shelf_of(book_id: BookId) -> str:
        """Say which shelf a book belongs on.

        Args:
            book_id: The book's id, e.g. B07.
        """
        return book(book_id)[1]

    def borrower_of(book_id: BookId) -> str:
        """Say which member has a book on loan ("nobody" if it is available).

        Args:
            book_id: The book's id, e.g. B07.
        """
        book(book_id)
        return borrower(book_id) or "nobody"

    def loans_of(member_id: MemberId) -> int:
        """Count the books a member has on loan.

        Args:
            member_id: The member's id, e.g. M03.
        """
        member(member_id)
        row = db.execute("SELECT COUNT(*) FROM loans WHERE member_id = ?", (member_id,))
        return int(row.fetchone()[0])

    def books_on(shelf: Shelf) -> str:
        """List the ids of the books that belong on a shelf.

        Args:
            shelf: The shelf.
        """
        rows = db.execute("SELECT id FROM books WHERE shelf = ? ORDER BY id", (shelf,))
        return json.dumps([row[0] for row in rows])

    def lend_book(book_id: BookId, member_id: MemberId) -> str:
        """Lend an available book to a member.

        Args:
            book_id: The book's id, e.g. B07.
            member_id: The member's id, e.g. M03.
        """
        book(book_id)
        member(member_id)
        if borrower(book_id):
            raise ToolError(f"book {book_id} is already on loan")
        db.execute("INSERT INTO loans VALUES (?, ?)", (book_id, member_id))
        return f"Book {book_id} is now on loan to {member_id}."

    def return_book(book_id: BookId) -> str:
        """Take back a book that is on loan.

        Args:
            book_id: The book's id, e.g. B07.
        """
        book(book_id)
        if not borrower(book_id):
            raise ToolError(f"book {book_id} is not on loan")
        db.execute("DELETE FROM loans WHERE book_id = ?", (book_id,))
        return f"Book {book_id} is back and available."

    def move_book(book_id: BookId, shelf: Shelf) -> str:
        """Move a book to another shelf.

        Args:
            book_id: The book's id, e.g. B07.
            shelf: The shelf it moves to.
        """
        if book(book_id)[1] == shelf:
            raise ToolError(f"book {book_id} is already on the {shelf} shelf")
        db.execute("UPDATE books SET shelf = ? WHERE id = ?", (shelf, book_id))
        return f"Book {book_id} now belongs on the {shelf} shelf."

    reads = [book_status, shelf_of, borrower_of, loans_of, books_on]
    return [*reads, lend_book, return_book, move_book]


source = sqlite_source(
    name="forge/library",
    description="A lending library's desk in SQLite: lend, return and shelve books; answer.",
    schema=SCHEMA,
    seed=seed,
    tools=tools,
    worlds=16,
    values={"book_id": "SELECT id FROM books", "member_id": "SELECT id FROM members"},
    templates={
        "lend_book": "Lend book {book_id} to member {member_id}.",
        "return_book": "Return book {book_id}.",
        "move_book": "Move book {book_id} to the {shelf} shelf.",
        "book_status": "Is book {book_id} available or on loan?",
        "shelf_of": "Which shelf does book {book_id} belong on?",
        "borrower_of": "Which member has book {book_id}?",
        "loans_of": "How many books does member {member_id} have on loan?",
    },
)
