"""Question templates for the ``retail`` schema."""

from __future__ import annotations

from .base import MONTHS, Template, nums, t

CITIES = "SELECT DISTINCT city FROM customers ORDER BY city"
COUNTRIES = "SELECT DISTINCT country FROM customers ORDER BY country"
CATS = "SELECT name AS cat FROM categories ORDER BY name"
YEARS = nums("year", 2021, 2022, 2023, 2024)
STATUS = "SELECT DISTINCT status FROM orders ORDER BY status"

TEMPLATES: tuple[Template, ...] = (
    # ---------------------------------------------------------------- easy
    t("filter", "easy", "How many customers live in {city}?",
      "SELECT COUNT(*) FROM customers WHERE city = '{city}'", CITIES, cap=5),
    t("filter", "easy", "List the names of the customers who live in {city}, in "
      "alphabetical order.",
      "SELECT name FROM customers WHERE city = '{city}' ORDER BY name", CITIES, cap=4),
    t("filter", "easy", "How many customers are from {country}?",
      "SELECT COUNT(*) FROM customers WHERE country = '{country}'", COUNTRIES, cap=5),
    t("filter", "easy", "How many orders have the status '{status}'?",
      "SELECT COUNT(*) FROM orders WHERE status = '{status}'", STATUS, cap=5),
    t("filter", "easy",
      "List the name and price of every product that costs more than {p}, sorted by price "
      "from highest to lowest, then by product id.",
      "SELECT name, price FROM products WHERE price > {p} ORDER BY price DESC, product_id",
      nums("p", 150, 200, 250, 300), cap=4),
    t("filter", "easy", "How many products have fewer than {n} units in stock?",
      "SELECT COUNT(*) FROM products WHERE stock < {n}", nums("n", 10, 20, 50, 100), cap=4),
    t("filter", "easy", "List the names of the products whose weight_kg is {cmp} {w}, in "
      "alphabetical order.",
      "SELECT name FROM products WHERE weight_kg {op} {w} ORDER BY name",
      [{"cmp": "below", "op": "<"}, {"cmp": "above", "op": ">"}],
      nums("w", 1, 2, 10, 11), cap=3),
    t("filter", "easy", "List the ids of the orders placed by the customer with id {cid}, "
      "in increasing order.",
      "SELECT order_id FROM orders WHERE customer_id = {cid} ORDER BY order_id",
      "SELECT DISTINCT customer_id AS cid FROM orders ORDER BY 1", cap=4),
    t("aggregate", "easy",
      "What is the average price of the products with at least {n} units in stock, rounded "
      "to 2 decimals?",
      "SELECT {ROUND2(AVG(price))} FROM products WHERE stock >= {n}",
      nums("n", 50, 100, 150, 200, 250), cap=4),
    t("aggregate", "easy",
      "What is the total number of units in stock across all products priced below {p}?",
      "SELECT SUM(stock) FROM products WHERE price < {p}", nums("p", 20, 50, 100), cap=3),
    t("aggregate", "easy", "What are the lowest and the highest product price? Return the "
      "minimum and the maximum.", "SELECT MIN(price), MAX(price) FROM products"),
    t("aggregate", "easy", "What is the average review rating, rounded to 2 decimals?",
      "SELECT {ROUND2(AVG(rating))} FROM reviews"),
    t("aggregate", "easy", "How many reviews have a rating of {r}?",
      "SELECT COUNT(*) FROM reviews WHERE rating = {r}", nums("r", 1, 2, 3, 4, 5), cap=4),
    t("aggregate", "easy", "How many different customers have placed at least one order?",
      "SELECT COUNT(DISTINCT customer_id) FROM orders"),
    t("null", "easy", "How many {what}?",
      "SELECT COUNT(*) FROM {tab} WHERE {col} IS NULL",
      [{"what": "customers have no email address (email is NULL)", "tab": "customers",
        "col": "email"},
       {"what": "customers have no loyalty tier", "tab": "customers", "col": "loyalty_tier"},
       {"what": "products have an unknown weight (weight_kg is NULL)", "tab": "products",
        "col": "weight_kg"},
       {"what": "orders have no shipped date", "tab": "orders", "col": "shipped_date"},
       {"what": "reviews have no comment", "tab": "reviews", "col": "comment"}], cap=5),
    t("null", "easy", "List the name and email of the customers who live in {city}, showing "
      "'unknown' when the email is missing.",
      "SELECT name, COALESCE(email, 'unknown') FROM customers WHERE city = '{city}'",
      CITIES, cap=4),
    t("null", "easy", "List the names of the customers in {city} who have a loyalty tier, "
      "in alphabetical order.",
      "SELECT name FROM customers WHERE city = '{city}' AND loyalty_tier IS NOT NULL "
      "ORDER BY name", CITIES, cap=3),
    t("date", "easy", "How many orders were placed in {year}?",
      "SELECT COUNT(*) FROM orders WHERE {YEAR(order_date)} = {year}", YEARS, cap=4),
    t("date", "easy", "How many customers signed up in {year}?",
      "SELECT COUNT(*) FROM customers WHERE {YEAR(signup_date)} = {year}",
      nums("year", 2019, 2020, 2021, 2022, 2023), cap=4),
    t("date", "easy", "How many orders were placed between {d1} and {d2}, both dates included?",
      "SELECT COUNT(*) FROM orders WHERE order_date BETWEEN '{d1}' AND '{d2}'",
      [{"d1": "2021-01-01", "d2": "2021-03-31"}, {"d1": "2022-06-01", "d2": "2022-08-31"},
       {"d1": "2023-11-15", "d2": "2024-01-15"}, {"d1": "2024-05-01", "d2": "2024-05-31"}],
      cap=3),
    t("date", "easy", "List the ids of the orders placed on {day}, in increasing order.",
      "SELECT order_id FROM orders WHERE order_date = '{day}' ORDER BY order_id",
      "SELECT DISTINCT CAST(order_date AS TEXT) AS day FROM orders ORDER BY 1", cap=3),
    t("order_limit", "easy", "What are the name and price of the {n} most expensive products? "
      "Order them by price from highest to lowest, breaking ties by product id.",
      "SELECT name, price FROM products ORDER BY price DESC, product_id LIMIT {n}",
      nums("n", 3, 5, 10), cap=3),
    t("order_limit", "easy", "List the name and stock of the {n} products with the least "
      "stock, lowest first, breaking ties by product id.",
      "SELECT name, stock FROM products ORDER BY stock, product_id LIMIT {n}",
      nums("n", 3, 5), cap=2),
    # ---------------------------------------------------------------- medium
    t("join2", "medium", "How many products belong to the '{cat}' category?",
      "SELECT COUNT(*) FROM products p JOIN categories c ON c.category_id = p.category_id "
      "WHERE c.name = '{cat}'", CATS, cap=7),
    t("join2", "medium",
      "What is the average price of the products in the '{cat}' category, rounded to 2 decimals?",
      "SELECT {ROUND2(AVG(p.price))} FROM products p JOIN categories c "
      "ON c.category_id = p.category_id WHERE c.name = '{cat}'", CATS, cap=7),
    t("join2", "medium", "How many orders were placed by customers living in {city}?",
      "SELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
      "WHERE c.city = '{city}'", CITIES, cap=7),
    t("join2", "medium", "List the names of the customers who placed an order on {day}, in "
      "alphabetical order, without duplicates.",
      "SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.customer_id "
      "WHERE o.order_date = '{day}' ORDER BY c.name",
      "SELECT DISTINCT CAST(order_date AS TEXT) AS day FROM orders ORDER BY 1", cap=5),
    t("join2", "medium", "What is the average rating of the reviews of products in the "
      "'{cat}' category?",
      "SELECT AVG(r.rating) FROM reviews r JOIN products p ON p.product_id = r.product_id "
      "JOIN categories c ON c.category_id = p.category_id WHERE c.name = '{cat}'", CATS, cap=4),
    t("join2", "medium", "List the name and price of the discontinued products in the '{cat}' "
      "category, sorted by name, then by product id.",
      "SELECT p.name, p.price FROM products p JOIN categories c ON c.category_id = p.category_id "
      "WHERE c.name = '{cat}' AND p.discontinued = TRUE ORDER BY p.name, p.product_id",
      CATS, cap=3),
    t("group_having", "medium", "For each category, how many products cost more than {p}? "
      "Return the category name and the count, leaving out categories with no such product.",
      "SELECT c.name, COUNT(*) FROM products p JOIN categories c "
      "ON c.category_id = p.category_id WHERE p.price > {p} GROUP BY c.category_id, c.name",
      nums("p", 30, 60, 100), cap=3),
    t("group_having", "medium", "Which cities have more than {n} customers? Return each city "
      "and its number of customers.",
      "SELECT city, COUNT(*) FROM customers GROUP BY city HAVING COUNT(*) > {n}",
      nums("n", 2, 3, 4, 5), cap=4),
    t("group_having", "medium", "For each order status, how many orders were placed in {year}? "
      "Return the status and the count.",
      "SELECT status, COUNT(*) FROM orders WHERE {YEAR(order_date)} = {year} GROUP BY status",
      YEARS, cap=3),
    t("group_having", "medium", "Which categories have an average product price above {p}? "
      "Return the category name and the average price rounded to 2 decimals.",
      "SELECT c.name, {ROUND2(AVG(p.price))} FROM products p JOIN categories c "
      "ON c.category_id = p.category_id GROUP BY c.category_id, c.name "
      "HAVING AVG(p.price) > {p}", nums("p", 40, 60, 80), cap=3),
    t("date", "medium", "How many orders were placed in {month_name} {year}?",
      "SELECT COUNT(*) FROM orders WHERE {YEAR(order_date)} = {year} "
      "AND {MONTH(order_date)} = {month}", YEARS, MONTHS, cap=8),
    t("date", "medium", "How many orders were shipped more than {d} days after they were placed?",
      "SELECT COUNT(*) FROM orders WHERE shipped_date IS NOT NULL "
      "AND {DAYS(order_date, shipped_date)} > {d}", nums("d", 5, 7, 10), cap=3),
    t("date", "medium", "What was the total revenue (quantity times unit price) of the order "
      "items of orders placed in {year}, rounded to 2 decimals?",
      "SELECT {ROUND2(SUM(oi.quantity * oi.unit_price))} FROM order_items oi JOIN orders o "
      "ON o.order_id = oi.order_id WHERE {YEAR(o.order_date)} = {year}", YEARS, cap=4),
    t("date", "medium", "For each month of {year}, how many orders were placed? Return the "
      "month number (1-12) and the count, ordered by month.",
      "SELECT {MONTH(order_date)} AS m, COUNT(*) FROM orders WHERE {YEAR(order_date)} = {year} "
      "GROUP BY {MONTH(order_date)} ORDER BY m", YEARS, cap=3),
    t("null", "medium", "For each loyalty tier, how many customers have it? Use 'none' for "
      "customers without a tier. Return the tier and the count.",
      "SELECT COALESCE(loyalty_tier, 'none'), COUNT(*) FROM customers "
      "GROUP BY COALESCE(loyalty_tier, 'none')"),
    t("order_limit", "medium", "Which {n} customers placed the most orders? Return the customer "
      "name and their number of orders, most orders first, breaking ties by customer id.",
      "SELECT c.name, COUNT(*) AS n FROM customers c JOIN orders o "
      "ON o.customer_id = c.customer_id GROUP BY c.customer_id, c.name "
      "ORDER BY n DESC, c.customer_id LIMIT {n}", nums("n", 3, 5), cap=2),
    # ---------------------------------------------------------------- hard
    t("join3", "hard", "How many units of products in the '{cat}' category were sold in "
      "orders with the status 'delivered'? Return the total quantity.",
      "SELECT SUM(oi.quantity) FROM order_items oi JOIN products p "
      "ON p.product_id = oi.product_id JOIN categories c ON c.category_id = p.category_id "
      "JOIN orders o ON o.order_id = oi.order_id "
      "WHERE c.name = '{cat}' AND o.status = 'delivered'", CATS, cap=4),
    t("join3", "hard", "List the names of the customers from {city} who bought at least one "
      "product in the '{cat}' category, in alphabetical order, without duplicates.",
      "SELECT DISTINCT cu.name FROM customers cu JOIN orders o ON o.customer_id = cu.customer_id "
      "JOIN order_items oi ON oi.order_id = o.order_id JOIN products p "
      "ON p.product_id = oi.product_id JOIN categories c ON c.category_id = p.category_id "
      "WHERE cu.city = '{city}' AND c.name = '{cat}' ORDER BY cu.name", CITIES, CATS, cap=6),
    t("join3", "hard", "How many distinct customers bought a product from the '{cat}' "
      "category in {year}?",
      "SELECT COUNT(DISTINCT o.customer_id) FROM orders o JOIN order_items oi "
      "ON oi.order_id = o.order_id JOIN products p ON p.product_id = oi.product_id "
      "JOIN categories c ON c.category_id = p.category_id "
      "WHERE c.name = '{cat}' AND {YEAR(o.order_date)} = {year}", CATS, YEARS, cap=3),
    t("join3", "hard", "For each category, what was the total revenue (quantity times unit "
      "price) in {year}? Return the category name and the revenue rounded to 2 decimals.",
      "SELECT c.name, {ROUND2(SUM(oi.quantity * oi.unit_price))} FROM order_items oi "
      "JOIN orders o ON o.order_id = oi.order_id JOIN products p "
      "ON p.product_id = oi.product_id JOIN categories c ON c.category_id = p.category_id "
      "WHERE {YEAR(o.order_date)} = {year} GROUP BY c.category_id, c.name", YEARS, cap=2),
    t("subquery", "hard", "List the name and price of the products in the '{cat}' category "
      "that cost more than the average price of all products, sorted by price from highest "
      "to lowest, then by product id.",
      "SELECT p.name, p.price FROM products p JOIN categories c ON c.category_id = p.category_id "
      "WHERE c.name = '{cat}' AND p.price > (SELECT AVG(price) FROM products) "
      "ORDER BY p.price DESC, p.product_id", CATS, cap=3),
    t("subquery", "hard", "For each category, list the category name and the name and price "
      "of its most expensive product (if several are tied, the one with the smallest "
      "product id).",
      "SELECT c.name, p.name, p.price FROM products p JOIN categories c "
      "ON c.category_id = p.category_id WHERE p.product_id = (SELECT p2.product_id "
      "FROM products p2 WHERE p2.category_id = p.category_id "
      "ORDER BY p2.price DESC, p2.product_id LIMIT 1)"),
    t("subquery", "hard", "How many customers from {city} have never written a review?",
      "SELECT COUNT(*) FROM customers c WHERE c.city = '{city}' AND NOT EXISTS "
      "(SELECT 1 FROM reviews r WHERE r.customer_id = c.customer_id)", CITIES, cap=4),
    t("subquery", "hard", "List the names of the products in the '{cat}' category that have "
      "never been reviewed, in alphabetical order.",
      "SELECT p.name FROM products p JOIN categories c ON c.category_id = p.category_id "
      "WHERE c.name = '{cat}' AND p.product_id NOT IN (SELECT product_id FROM reviews) "
      "ORDER BY p.name", CATS, cap=3),
    t("subquery", "hard", "List the names of the customers who placed orders both in {y1} and "
      "in {y2}, in alphabetical order, without duplicates.",
      "SELECT DISTINCT name FROM customers WHERE customer_id IN (SELECT customer_id FROM orders "
      "WHERE {YEAR(order_date)} = {y1}) AND customer_id IN (SELECT customer_id FROM orders "
      "WHERE {YEAR(order_date)} = {y2}) ORDER BY name",
      [{"y1": 2021, "y2": 2022}, {"y1": 2022, "y2": 2023}, {"y1": 2023, "y2": 2024},
       {"y1": 2021, "y2": 2024}], cap=3),
    t("subquery", "hard", "Among the customers who live in {city}, list the id and name of "
      "those whose total spending (quantity times unit price over all their order items) is "
      "above the average total spending of all customers who have ordered.",
      "SELECT c.customer_id, c.name FROM customers c WHERE c.city = '{city}' AND "
      "(SELECT SUM(oi.quantity * oi.unit_price) FROM orders o JOIN order_items oi "
      "ON oi.order_id = o.order_id WHERE o.customer_id = c.customer_id) > "
      "(SELECT AVG(t.total) FROM (SELECT SUM(oi.quantity * oi.unit_price) AS total "
      "FROM orders o JOIN order_items oi ON oi.order_id = o.order_id "
      "GROUP BY o.customer_id) t)", CITIES, cap=3),
    t("group_having", "hard", "Which customers have spent more than {x} in total (quantity "
      "times unit price over all their order items)? Return the customer id, the name and the "
      "total rounded to 2 decimals.",
      "SELECT c.customer_id, c.name, {ROUND2(SUM(oi.quantity * oi.unit_price))} "
      "FROM customers c JOIN orders o ON o.customer_id = c.customer_id JOIN order_items oi "
      "ON oi.order_id = o.order_id GROUP BY c.customer_id, c.name "
      "HAVING SUM(oi.quantity * oi.unit_price) > {x}", nums("x", 2000, 3000, 4000), cap=3),
    t("order_limit", "hard", "Which customer placed the most orders in {year}? Return their "
      "name and number of orders; if several are tied, return the one with the smallest "
      "customer id.",
      "SELECT c.name, COUNT(*) AS n FROM customers c JOIN orders o "
      "ON o.customer_id = c.customer_id WHERE {YEAR(o.order_date)} = {year} "
      "GROUP BY c.customer_id, c.name ORDER BY n DESC, c.customer_id LIMIT 1", YEARS, cap=3),
    t("order_limit", "hard", "What are the {n} best-selling products by total quantity sold in "
      "orders that were not cancelled? Return the product name and the quantity, highest "
      "first, breaking ties by product id.",
      "SELECT p.name, SUM(oi.quantity) AS q FROM products p JOIN order_items oi "
      "ON oi.product_id = p.product_id JOIN orders o ON o.order_id = oi.order_id "
      "WHERE o.status <> 'cancelled' GROUP BY p.product_id, p.name "
      "ORDER BY q DESC, p.product_id LIMIT {n}", nums("n", 3, 5), cap=2),
    t("null", "hard", "For each loyalty tier (use 'none' for customers without a tier), how "
      "many orders did its customers place in {year}? Return the tier and the count.",
      "SELECT COALESCE(c.loyalty_tier, 'none'), COUNT(*) FROM customers c JOIN orders o "
      "ON o.customer_id = c.customer_id WHERE {YEAR(o.order_date)} = {year} "
      "GROUP BY COALESCE(c.loyalty_tier, 'none')", YEARS, cap=2),
    t("date", "hard", "For each year, what was the average number of days between order and "
      "shipping for shipped orders (orders with a shipped date)? Return the year and the "
      "average rounded to 2 decimals, ordered by year.",
      "SELECT {YEAR(order_date)} AS y, {ROUND2(AVG({DAYS(order_date, shipped_date)}))} "
      "FROM orders WHERE shipped_date IS NOT NULL GROUP BY {YEAR(order_date)} ORDER BY y"),
)  # fmt: skip
