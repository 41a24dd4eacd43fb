"""``library``: authors, books by genre, library members and their loans."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import sqlalchemy as sa

from ._common import FIRST_NAMES, LAST_NAMES, Rows, SchemaDef, maybe, rand_date, text, weighted

__all__ = ["COUNTRIES", "GENRES", "SCHEMA"]

GENRES = (
    "Fiction", "Mystery", "Science Fiction", "Fantasy", "History", "Biography", "Poetry",
    "Science", "Philosophy", "Travel",
)  # fmt: skip
COUNTRIES = (
    "France", "Germany", "Spain", "Italy", "Ireland", "United Kingdom", "United States",
    "Canada", "Brazil", "Japan", "Nigeria", "Poland",
)  # fmt: skip
CITIES = ("Lyon", "Paris", "Berlin", "Madrid", "Rome", "Dublin", "Lisbon", "Vienna")
LANGUAGES: tuple[tuple[str, float], ...] = (
    ("English", 0.5), ("French", 0.15), ("German", 0.12), ("Spanish", 0.12), ("Italian", 0.11),
)  # fmt: skip
MEMBERSHIPS: tuple[tuple[str, float], ...] = (
    ("standard", 0.6), ("premium", 0.2), ("student", 0.2),
)  # fmt: skip
TITLE_ADJ = (
    "Silent", "Lost", "Hidden", "Golden", "Broken", "Distant", "Crimson", "Frozen",
    "Secret", "Endless", "Quiet", "Wild",
)  # fmt: skip
TITLE_NOUN = (
    "River", "Garden", "Empire", "Voyage", "Letters", "Kingdom", "Harbor", "Mountain",
    "Archive", "Summer", "Machine", "Island",
)  # fmt: skip

metadata = sa.MetaData()

sa.Table(
    "authors", metadata,
    sa.Column("author_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", text(), nullable=False),
    sa.Column("birth_year", sa.Integer, nullable=True),
    sa.Column("country", text(), nullable=False),
)  # fmt: skip
sa.Table(
    "genres", metadata,
    sa.Column("genre_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", text(), nullable=False, unique=True),
)  # fmt: skip
sa.Table(
    "books", metadata,
    sa.Column("book_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("title", text(), nullable=False),
    sa.Column("author_id", sa.Integer, sa.ForeignKey("authors.author_id"), nullable=False),
    sa.Column("genre_id", sa.Integer, sa.ForeignKey("genres.genre_id"), nullable=False),
    sa.Column("published_year", sa.Integer, nullable=False),
    sa.Column("pages", sa.Integer, nullable=True),
    sa.Column("language", text(), nullable=False),
    sa.Column("isbn", text(), nullable=True),
)  # fmt: skip
sa.Table(
    "members", metadata,
    sa.Column("member_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", text(), nullable=False),
    sa.Column("city", text(), nullable=False),
    sa.Column("joined_date", sa.Date, nullable=False),
    sa.Column("email", text(), nullable=True),
    sa.Column("membership", text(), nullable=False),
)  # fmt: skip
sa.Table(
    "loans", metadata,
    sa.Column("loan_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("book_id", sa.Integer, sa.ForeignKey("books.book_id"), nullable=False),
    sa.Column("member_id", sa.Integer, sa.ForeignKey("members.member_id"), nullable=False),
    sa.Column("loan_date", sa.Date, nullable=False),
    sa.Column("due_date", sa.Date, nullable=False),
    sa.Column("return_date", sa.Date, nullable=True),
    sa.Column("fine", sa.Float, nullable=True),
)  # fmt: skip


def generate(rng: random.Random, scale: int) -> Rows:
    """Rows for every library table (about 1,000 rows per unit of ``scale``)."""
    authors = [
        {"author_id": i, "name": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}",
         "birth_year": maybe(rng, 0.12, rng.randint(1850, 1990)),
         "country": rng.choice(COUNTRIES)}
        for i in range(1, 40 * scale + 1)
    ]  # fmt: skip
    genres = [{"genre_id": i, "name": g} for i, g in enumerate(GENRES, start=1)]
    books: list[dict[str, Any]] = []
    for i in range(1, 160 * scale + 1):
        title = f"The {rng.choice(TITLE_ADJ)} {rng.choice(TITLE_NOUN)}"
        if rng.random() < 0.3:
            title = f"{rng.choice(TITLE_NOUN)} of {rng.choice(CITIES)}"
        isbn = f"978-{rng.randint(0, 9)}-{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}"
        books.append({
            "book_id": i, "title": title, "author_id": rng.randint(1, len(authors)),
            "genre_id": rng.randint(1, len(GENRES)),
            "published_year": rng.randint(1900, 2024),
            "pages": maybe(rng, 0.1, rng.randint(80, 900)),
            "language": weighted(rng, LANGUAGES), "isbn": maybe(rng, 0.15, isbn),
        })  # fmt: skip
    members: list[dict[str, Any]] = []
    for i in range(1, 100 * scale + 1):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        email = f"{first}{i}@mail.example".lower()
        members.append({
            "member_id": i, "name": f"{first} {last}", "city": rng.choice(CITIES),
            "joined_date": rand_date(rng, dt.date(2015, 1, 1), dt.date(2024, 6, 30)),
            "email": maybe(rng, 0.2, email), "membership": weighted(rng, MEMBERSHIPS),
        })  # fmt: skip
    loans: list[dict[str, Any]] = []
    for i in range(1, 700 * scale + 1):
        start = rand_date(rng, dt.date(2022, 1, 1), dt.date(2024, 12, 31))
        due = start + dt.timedelta(days=21)
        returned = maybe(rng, 0.12, start + dt.timedelta(days=rng.randint(1, 45)))
        fine = None
        if returned is not None and returned > due:
            fine = round((returned - due).days * 0.25, 2)
        loans.append({
            "loan_id": i, "book_id": rng.randint(1, len(books)),
            "member_id": rng.randint(1, len(members)), "loan_date": start, "due_date": due,
            "return_date": returned, "fine": fine,
        })  # fmt: skip
    return {"authors": authors, "genres": genres, "books": books, "members": members,
            "loans": loans}  # fmt: skip


SCHEMA = SchemaDef(
    name="library",
    description=(
        "A public library. `authors` (author_id, name, birth_year or NULL when unknown, "
        "country) write `books` (book_id, title, author_id, genre_id, published_year, pages "
        "or NULL, language, isbn or NULL) that belong to `genres` (genre_id, name). "
        "`members` (member_id, name, city, joined_date, email or NULL, membership: "
        "'standard'/'premium'/'student') borrow books through `loans` (loan_id, book_id, "
        "member_id, loan_date, due_date, return_date: NULL while the book is still out, "
        "fine: the late fee paid, NULL when the book came back on time or is still out). "
        "Dates are DATE values."
    ),
    metadata=metadata,
    generate=generate,
)
