"""``retail``: an online shop with customers, a product catalogue, orders and reviews."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import sqlalchemy as sa

from ._common import FIRST_NAMES, LAST_NAMES, Rows, SchemaDef, maybe, rand_date, text, weighted

__all__ = ["CATEGORIES", "CITIES", "SCHEMA", "STATUSES", "TIERS"]

CITIES: tuple[tuple[str, str], ...] = (
    ("Lyon", "France"), ("Paris", "France"), ("Marseille", "France"),
    ("Berlin", "Germany"), ("Munich", "Germany"), ("Hamburg", "Germany"),
    ("Madrid", "Spain"), ("Barcelona", "Spain"), ("Rome", "Italy"), ("Milan", "Italy"),
    ("Lisbon", "Portugal"), ("Porto", "Portugal"), ("Amsterdam", "Netherlands"),
    ("Vienna", "Austria"), ("Dublin", "Ireland"), ("Brussels", "Belgium"),
)  # fmt: skip

#: category -> (product nouns, lowest price, highest price)
CATEGORIES: tuple[tuple[str, tuple[str, ...], float, float], ...] = (
    ("Books", ("Novel", "Cookbook", "Atlas", "Guide", "Anthology"), 5.0, 60.0),
    ("Electronics", ("Headphones", "Speaker", "Charger", "Monitor", "Keyboard"), 15.0, 400.0),
    ("Garden", ("Hose", "Shovel", "Planter", "Rake", "Sprinkler"), 8.0, 120.0),
    ("Kitchen", ("Kettle", "Blender", "Pan", "Knife Set", "Toaster"), 10.0, 250.0),
    ("Sports", ("Yoga Mat", "Dumbbell", "Football", "Racket", "Helmet"), 10.0, 200.0),
    ("Toys", ("Puzzle", "Robot", "Doll", "Kite", "Board Game"), 5.0, 80.0),
    ("Clothing", ("Jacket", "Scarf", "Sweater", "Raincoat", "Cap"), 12.0, 180.0),
    ("Beauty", ("Lotion", "Perfume", "Shampoo", "Lip Balm", "Face Mask"), 4.0, 90.0),
)
ADJECTIVES = ("Classic", "Deluxe", "Compact", "Eco", "Smart", "Vintage", "Ultra", "Basic")
STATUSES: tuple[tuple[str, float], ...] = (
    ("pending", 0.1), ("shipped", 0.2), ("delivered", 0.55), ("cancelled", 0.1),
    ("returned", 0.05),
)  # fmt: skip
TIERS: tuple[tuple[str | None, float], ...] = (
    ("bronze", 0.35), ("silver", 0.25), ("gold", 0.12), (None, 0.28),
)  # fmt: skip
COMMENTS = (
    "Great value", "Arrived late", "Works as described", "Would buy again",
    "Poor quality", "Excellent", "Too small", "Gift for a friend",
)  # fmt: skip

metadata = sa.MetaData()

sa.Table(
    "customers", metadata,
    sa.Column("customer_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", text(), nullable=False),
    sa.Column("email", text(), nullable=True),
    sa.Column("city", text(), nullable=False),
    sa.Column("country", text(), nullable=False),
    sa.Column("signup_date", sa.Date, nullable=False),
    sa.Column("loyalty_tier", text(), nullable=True),
)  # fmt: skip
sa.Table(
    "categories", metadata,
    sa.Column("category_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", text(), nullable=False, unique=True),
)  # fmt: skip
sa.Table(
    "products", metadata,
    sa.Column("product_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", text(), nullable=False),
    sa.Column("category_id", sa.Integer, sa.ForeignKey("categories.category_id"), nullable=False),
    sa.Column("price", sa.Float, nullable=False),
    sa.Column("stock", sa.Integer, nullable=False),
    sa.Column("weight_kg", sa.Float, nullable=True),
    sa.Column("discontinued", sa.Boolean, nullable=False),
)  # fmt: skip
sa.Table(
    "orders", metadata,
    sa.Column("order_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("customer_id", sa.Integer, sa.ForeignKey("customers.customer_id"), nullable=False),
    sa.Column("order_date", sa.Date, nullable=False),
    sa.Column("status", text(), nullable=False),
    sa.Column("shipped_date", sa.Date, nullable=True),
)  # fmt: skip
sa.Table(
    "order_items", metadata,
    sa.Column("order_item_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("order_id", sa.Integer, sa.ForeignKey("orders.order_id"), nullable=False),
    sa.Column("product_id", sa.Integer, sa.ForeignKey("products.product_id"), nullable=False),
    sa.Column("quantity", sa.Integer, nullable=False),
    sa.Column("unit_price", sa.Float, nullable=False),
)  # fmt: skip
sa.Table(
    "reviews", metadata,
    sa.Column("review_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("product_id", sa.Integer, sa.ForeignKey("products.product_id"), nullable=False),
    sa.Column("customer_id", sa.Integer, sa.ForeignKey("customers.customer_id"), nullable=False),
    sa.Column("rating", sa.Integer, nullable=False),
    sa.Column("review_date", sa.Date, nullable=False),
    sa.Column("comment", text(), nullable=True),
)  # fmt: skip


def generate(rng: random.Random, scale: int) -> Rows:
    """Rows for every retail table (about 1,060 rows per unit of ``scale``)."""
    customers: list[dict[str, Any]] = []
    for i in range(1, 60 * scale + 1):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        city, country = rng.choice(CITIES)
        email = f"{first}.{last.replace(' ', '')}{i}@example.com".lower()
        customers.append({
            "customer_id": i, "name": f"{first} {last}", "email": maybe(rng, 0.15, email),
            "city": city, "country": country,
            "signup_date": rand_date(rng, dt.date(2019, 1, 1), dt.date(2023, 12, 31)),
            "loyalty_tier": weighted(rng, TIERS),
        })  # fmt: skip
    categories = [{"category_id": i, "name": c[0]} for i, c in enumerate(CATEGORIES, start=1)]
    products: list[dict[str, Any]] = []
    for i in range(1, 40 * scale + 1):
        cat = rng.randrange(len(CATEGORIES))
        _, nouns, lo, hi = CATEGORIES[cat]
        products.append({
            "product_id": i, "name": f"{rng.choice(ADJECTIVES)} {rng.choice(nouns)}",
            "category_id": cat + 1, "price": round(rng.uniform(lo, hi), 2),
            "stock": rng.randint(0, 300),
            "weight_kg": maybe(rng, 0.2, round(rng.uniform(0.1, 12.0), 2)),
            "discontinued": rng.random() < 0.12,
        })  # fmt: skip
    orders: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []
    for i in range(1, 250 * scale + 1):
        status = weighted(rng, STATUSES)
        day = rand_date(rng, dt.date(2021, 1, 1), dt.date(2024, 12, 31))
        shipped = None
        if status in ("shipped", "delivered", "returned"):
            shipped = day + dt.timedelta(days=rng.randint(0, 12))
        orders.append({
            "order_id": i, "customer_id": rng.randint(1, len(customers)), "order_date": day,
            "status": status, "shipped_date": shipped,
        })  # fmt: skip
        for product_id in rng.sample(range(1, len(products) + 1), rng.randint(1, 4)):
            price = products[product_id - 1]["price"]
            if rng.random() < 0.15:  # a discounted sale
                price = round(price * 0.9, 2)
            items.append({
                "order_item_id": len(items) + 1, "order_id": i, "product_id": product_id,
                "quantity": rng.randint(1, 5), "unit_price": price,
            })  # fmt: skip
    reviews = [
        {
            "review_id": i, "product_id": rng.randint(1, len(products)),
            "customer_id": rng.randint(1, len(customers)),
            "rating": weighted(rng, ((1, 0.08), (2, 0.12), (3, 0.2), (4, 0.32), (5, 0.28))),
            "review_date": rand_date(rng, dt.date(2021, 1, 1), dt.date(2024, 12, 31)),
            "comment": maybe(rng, 0.4, rng.choice(COMMENTS)),
        }
        for i in range(1, 80 * scale + 1)
    ]  # fmt: skip
    return {
        "customers": customers, "categories": categories, "products": products,
        "orders": orders, "order_items": items, "reviews": reviews,
    }  # fmt: skip


SCHEMA = SchemaDef(
    name="retail",
    description=(
        "An online shop. `customers` (customer_id, name, email, city, country, signup_date, "
        "loyalty_tier: 'bronze'/'silver'/'gold' or NULL) place `orders` (order_id, "
        "customer_id, order_date, status: 'pending'/'shipped'/'delivered'/'cancelled'/"
        "'returned', shipped_date: NULL until shipped). Each order has `order_items` "
        "(order_item_id, order_id, product_id, quantity, unit_price: the price actually "
        "paid per unit). `products` (product_id, name, category_id, price, stock, weight_kg "
        "or NULL, discontinued: boolean) belong to `categories` (category_id, name). "
        "Customers write `reviews` (review_id, product_id, customer_id, rating 1-5, "
        "review_date, comment or NULL). Dates are DATE values (ISO text in SQLite)."
    ),
    metadata=metadata,
    generate=generate,
)
