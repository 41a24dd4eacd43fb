"""``flights``: airports, airlines, scheduled flights, passengers and their bookings."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import sqlalchemy as sa

from ._common import FIRST_NAMES, LAST_NAMES, Rows, SchemaDef, maybe, rand_date, text, weighted

__all__ = ["AIRLINES", "AIRPORTS", "SCHEMA"]

#: (IATA code, name, city, country)
AIRPORTS: tuple[tuple[str, str, str, str], ...] = (
    ("CDG", "Charles de Gaulle", "Paris", "France"), ("ORY", "Orly", "Paris", "France"),
    ("LHR", "Heathrow", "London", "United Kingdom"),
    ("LGW", "Gatwick", "London", "United Kingdom"),
    ("FRA", "Frankfurt", "Frankfurt", "Germany"), ("MUC", "Franz Josef Strauss", "Munich",
                                                    "Germany"),
    ("AMS", "Schiphol", "Amsterdam", "Netherlands"), ("MAD", "Barajas", "Madrid", "Spain"),
    ("BCN", "El Prat", "Barcelona", "Spain"), ("FCO", "Fiumicino", "Rome", "Italy"),
    ("LIS", "Humberto Delgado", "Lisbon", "Portugal"), ("DUB", "Dublin", "Dublin", "Ireland"),
    ("VIE", "Schwechat", "Vienna", "Austria"), ("ZRH", "Kloten", "Zurich", "Switzerland"),
    ("CPH", "Kastrup", "Copenhagen", "Denmark"), ("JFK", "John F. Kennedy", "New York",
                                                  "United States"),
)  # fmt: skip
#: (IATA code, name, country)
AIRLINES: tuple[tuple[str, str, str], ...] = (
    ("AF", "Air France", "France"), ("BA", "British Airways", "United Kingdom"),
    ("LH", "Lufthansa", "Germany"), ("KL", "KLM", "Netherlands"), ("IB", "Iberia", "Spain"),
    ("TP", "TAP Air Portugal", "Portugal"), ("EI", "Aer Lingus", "Ireland"),
    ("LX", "Swiss", "Switzerland"), ("SK", "SAS", "Denmark"), ("OS", "Austrian", "Austria"),
)  # fmt: skip
NATIONALITIES = (
    "France", "Germany", "Spain", "Italy", "Portugal", "Ireland", "Netherlands",
    "United Kingdom", "United States", "Canada", "Brazil", "Japan",
)  # fmt: skip
FLIGHT_STATUS: tuple[tuple[str, float], ...] = (
    ("landed", 0.6), ("delayed", 0.15), ("cancelled", 0.08), ("scheduled", 0.17),
)  # fmt: skip
#: fare class -> (weight, lowest price, highest price)
FARES: tuple[tuple[str, float, float, float], ...] = (
    ("economy", 0.65, 40.0, 350.0), ("premium", 0.15, 150.0, 600.0),
    ("business", 0.15, 300.0, 1500.0), ("first", 0.05, 900.0, 3000.0),
)  # fmt: skip

metadata = sa.MetaData()

sa.Table(
    "airports", metadata,
    sa.Column("code", text(3), primary_key=True),
    sa.Column("name", text(), nullable=False),
    sa.Column("city", text(), nullable=False),
    sa.Column("country", text(), nullable=False),
)  # fmt: skip
sa.Table(
    "airlines", metadata,
    sa.Column("airline_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("code", text(2), nullable=False, unique=True),
    sa.Column("name", text(), nullable=False),
    sa.Column("country", text(), nullable=False),
)  # fmt: skip
sa.Table(
    "flights", metadata,
    sa.Column("flight_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("flight_number", text(), nullable=False),
    sa.Column("airline_id", sa.Integer, sa.ForeignKey("airlines.airline_id"), nullable=False),
    sa.Column("origin", text(3), sa.ForeignKey("airports.code"), nullable=False),
    sa.Column("destination", text(3), sa.ForeignKey("airports.code"), nullable=False),
    sa.Column("departure_date", sa.Date, nullable=False),
    sa.Column("duration_minutes", sa.Integer, nullable=False),
    sa.Column("distance_km", sa.Integer, nullable=False),
    sa.Column("status", text(), nullable=False),
    sa.Column("delay_minutes", sa.Integer, nullable=True),
)  # fmt: skip
sa.Table(
    "passengers", metadata,
    sa.Column("passenger_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("first_name", text(), nullable=False),
    sa.Column("last_name", text(), nullable=False),
    sa.Column("nationality", text(), nullable=False),
    sa.Column("birth_date", sa.Date, nullable=False),
    sa.Column("frequent_flyer_no", text(), nullable=True),
)  # fmt: skip
sa.Table(
    "bookings", metadata,
    sa.Column("booking_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("flight_id", sa.Integer, sa.ForeignKey("flights.flight_id"), nullable=False),
    sa.Column("passenger_id", sa.Integer, sa.ForeignKey("passengers.passenger_id"),
              nullable=False),
    sa.Column("fare_class", text(), nullable=False),
    sa.Column("price", sa.Float, nullable=False),
    sa.Column("seat", text(), nullable=True),
    sa.Column("booked_on", sa.Date, nullable=False),
    sa.Column("checked_bags", sa.Integer, nullable=False),
)  # fmt: skip


def generate(rng: random.Random, scale: int) -> Rows:
    """Rows for every flights table (about 1,030 rows per unit of ``scale``)."""
    airports = [{"code": c, "name": n, "city": ci, "country": co} for c, n, ci, co in AIRPORTS]
    airlines = [
        {"airline_id": i, "code": c, "name": n, "country": co}
        for i, (c, n, co) in enumerate(AIRLINES, start=1)
    ]
    flights: list[dict[str, Any]] = []
    for i in range(1, 200 * scale + 1):
        airline = rng.randrange(len(AIRLINES))
        origin, dest = rng.sample(range(len(AIRPORTS)), 2)
        distance = rng.randint(300, 2500) if AIRPORTS[dest][0] != "JFK" else 5800
        if AIRPORTS[origin][0] == "JFK":
            distance = 5800 + rng.randint(-400, 600)
        status = weighted(rng, FLIGHT_STATUS)
        delay = None
        if status == "landed":
            delay = rng.choice((0, 0, 0, 5, 10, 15))
        elif status == "delayed":
            delay = rng.randint(20, 240)
        flights.append({
            "flight_id": i, "flight_number": f"{AIRLINES[airline][0]}{rng.randint(100, 9999)}",
            "airline_id": airline + 1, "origin": AIRPORTS[origin][0],
            "destination": AIRPORTS[dest][0],
            "departure_date": rand_date(rng, dt.date(2023, 1, 1), dt.date(2024, 12, 31)),
            "duration_minutes": distance // 12 + rng.randint(25, 60), "distance_km": distance,
            "status": status, "delay_minutes": delay,
        })  # fmt: skip
    passengers: list[dict[str, Any]] = []
    for i in range(1, 150 * scale + 1):
        passengers.append({
            "passenger_id": i, "first_name": rng.choice(FIRST_NAMES),
            "last_name": rng.choice(LAST_NAMES), "nationality": rng.choice(NATIONALITIES),
            "birth_date": rand_date(rng, dt.date(1940, 1, 1), dt.date(2012, 12, 31)),
            "frequent_flyer_no": maybe(rng, 0.55, f"FF{rng.randint(100000, 999999)}"),
        })  # fmt: skip
    bookings: list[dict[str, Any]] = []
    for i in range(1, 650 * scale + 1):
        flight = rng.randint(1, len(flights))
        fare, _, lo, hi = FARES[rng.choices(range(len(FARES)), [f[1] for f in FARES])[0]]
        seat = f"{rng.randint(1, 40)}{rng.choice('ABCDEF')}"
        booked = flights[flight - 1]["departure_date"] - dt.timedelta(days=rng.randint(1, 150))
        bookings.append({
            "booking_id": i, "flight_id": flight,
            "passenger_id": rng.randint(1, len(passengers)), "fare_class": fare,
            "price": round(rng.uniform(lo, hi), 2), "seat": maybe(rng, 0.2, seat),
            "booked_on": booked, "checked_bags": rng.choice((0, 0, 1, 1, 1, 2, 3)),
        })  # fmt: skip
    return {
        "airports": airports, "airlines": airlines, "flights": flights,
        "passengers": passengers, "bookings": bookings,
    }  # fmt: skip


SCHEMA = SchemaDef(
    name="flights",
    description=(
        "Air travel. `airports` (code: 3-letter IATA code, name, city, country) and "
        "`airlines` (airline_id, code, name, country) are reference tables. `flights` "
        "(flight_id, flight_number, airline_id, origin and destination: airport codes, "
        "departure_date, duration_minutes, distance_km, status: 'scheduled'/'landed'/"
        "'delayed'/'cancelled', delay_minutes: NULL for scheduled and cancelled flights) "
        "are booked by `passengers` (passenger_id, first_name, last_name, nationality, "
        "birth_date, frequent_flyer_no or NULL) through `bookings` (booking_id, flight_id, "
        "passenger_id, fare_class: 'economy'/'premium'/'business'/'first', price, seat or "
        "NULL when not yet assigned, booked_on, checked_bags). Dates are DATE values."
    ),
    metadata=metadata,
    generate=generate,
)
