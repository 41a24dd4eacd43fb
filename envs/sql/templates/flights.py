"""Question templates for the ``flights`` schema."""

from __future__ import annotations

from .base import MONTHS, Template, nums, t

AIRPORTS = "SELECT code AS ap, city AS apcity FROM airports ORDER BY code"
AIRLINES = "SELECT name AS airline FROM airlines ORDER BY name"
NATS = "SELECT DISTINCT nationality AS nat FROM passengers ORDER BY 1"
FARES = "SELECT DISTINCT fare_class AS fare FROM bookings ORDER BY 1"
STATUS = "SELECT DISTINCT status FROM flights ORDER BY 1"
YEARS = nums("year", 2023, 2024)
FA = "flights f JOIN airlines a ON a.airline_id = f.airline_id"
BF = "bookings b JOIN flights f ON f.flight_id = b.flight_id"

TEMPLATES: tuple[Template, ...] = (
    # ---------------------------------------------------------------- easy
    t("filter", "easy", "How many flights depart from the airport with code {ap}?",
      "SELECT COUNT(*) FROM flights WHERE origin = '{ap}'", AIRPORTS, cap=4),
    t("filter", "easy", "How many flights arrive at the airport with code {ap}?",
      "SELECT COUNT(*) FROM flights WHERE destination = '{ap}'", AIRPORTS, cap=5),
    t("filter", "easy", "List the flight ids of the flights from {ap} to {ap2}, in increasing "
      "order.", "SELECT flight_id FROM flights WHERE origin = '{ap}' AND destination = '{ap2}' "
      "ORDER BY flight_id", AIRPORTS,
      "SELECT code AS ap2 FROM airports ORDER BY code", cap=5),
    t("filter", "easy", "How many flights have the status '{status}'?",
      "SELECT COUNT(*) FROM flights WHERE status = '{status}'", STATUS, cap=4),
    t("filter", "easy", "How many passengers have the nationality '{nat}'?",
      "SELECT COUNT(*) FROM passengers WHERE nationality = '{nat}'", NATS, cap=4),
    t("filter", "easy", "List the first and last names of the passengers with the nationality "
      "'{nat}', sorted by last name, then first name, then passenger id.",
      "SELECT first_name, last_name FROM passengers WHERE nationality = '{nat}' "
      "ORDER BY last_name, first_name, passenger_id", NATS, cap=4),
    t("filter", "easy", "How many bookings are in the '{fare}' fare class?",
      "SELECT COUNT(*) FROM bookings WHERE fare_class = '{fare}'", FARES, cap=4),
    t("filter", "easy", "How many flights are longer than {km} km?",
      "SELECT COUNT(*) FROM flights WHERE distance_km > {km}", nums("km", 1000, 1500, 2000, 2400),
      cap=4),
    t("filter", "easy", "List the flight number and delay of the flights delayed by more than "
      "{m} minutes, longest delay first, breaking ties by flight id.",
      "SELECT flight_number, delay_minutes FROM flights WHERE delay_minutes > {m} "
      "ORDER BY delay_minutes DESC, flight_id", nums("m", 150, 180, 200, 220), cap=3),
    t("aggregate", "easy", "What is the average price of '{fare}' bookings, rounded to 2 "
      "decimals?", "SELECT {ROUND2(AVG(price))} FROM bookings WHERE fare_class = '{fare}'",
      FARES, cap=4),
    t("aggregate", "easy", "What is the total number of checked bags over all bookings in the "
      "'{fare}' fare class?", "SELECT SUM(checked_bags) FROM bookings WHERE fare_class = '{fare}'",
      FARES, cap=3),
    t("aggregate", "easy", "What are the shortest and the longest flight distance in km? "
      "Return the minimum and the maximum.", "SELECT MIN(distance_km), MAX(distance_km) "
      "FROM flights"),
    t("aggregate", "easy", "What is the average delay in minutes of the flights with status "
      "'{status}', rounded to 2 decimals?",
      "SELECT {ROUND2(AVG(delay_minutes))} FROM flights WHERE status = '{status}'",
      nums("status", "landed", "delayed"), cap=2),
    t("null", "easy", "How many {what}?", "SELECT COUNT(*) FROM {tab} WHERE {col} IS NULL",
      [{"what": "passengers have no frequent flyer number", "tab": "passengers",
        "col": "frequent_flyer_no"},
       {"what": "bookings have no seat assigned yet (seat is NULL)", "tab": "bookings",
        "col": "seat"},
       {"what": "flights have no recorded delay (delay_minutes is NULL)", "tab": "flights",
        "col": "delay_minutes"}], cap=3),
    t("null", "easy", "How many passengers with the nationality '{nat}' have a frequent flyer "
      "number?", "SELECT COUNT(*) FROM passengers WHERE nationality = '{nat}' "
      "AND frequent_flyer_no IS NOT NULL", NATS, cap=4),
    t("null", "easy", "List the booking id and seat of the bookings on flight {fid}, showing "
      "'unassigned' when there is no seat.",
      "SELECT booking_id, COALESCE(seat, 'unassigned') FROM bookings WHERE flight_id = {fid}",
      "SELECT DISTINCT flight_id AS fid FROM bookings WHERE seat IS NULL ORDER BY 1", cap=3),
    t("date", "easy", "How many flights departed in {year}?",
      "SELECT COUNT(*) FROM flights WHERE {YEAR(departure_date)} = {year}", YEARS, cap=2),
    t("date", "easy", "How many passengers were born before {year}?",
      "SELECT COUNT(*) FROM passengers WHERE birth_date < '{year}-01-01'",
      nums("year", 1950, 1960, 1970, 1980, 1990, 2000), cap=4),
    t("date", "easy", "List the flight ids of the flights departing on {day}, in increasing "
      "order.", "SELECT flight_id FROM flights WHERE departure_date = '{day}' ORDER BY flight_id",
      "SELECT DISTINCT CAST(departure_date AS TEXT) AS day FROM flights ORDER BY 1", cap=3),
    t("order_limit", "easy", "List the booking id and price of the {n} most expensive bookings, "
      "highest price first, breaking ties by booking id.",
      "SELECT booking_id, price FROM bookings ORDER BY price DESC, booking_id LIMIT {n}",
      nums("n", 3, 5, 10), cap=3),
    t("order_limit", "easy", "List the first name, last name and birth date of the {n} oldest "
      "passengers, oldest first, breaking ties by passenger id.",
      "SELECT first_name, last_name, birth_date FROM passengers ORDER BY birth_date, "
      "passenger_id LIMIT {n}", nums("n", 3, 5), cap=2),
    # ---------------------------------------------------------------- medium
    t("join2", "medium", "How many flights are operated by {airline}?",
      f"SELECT COUNT(*) FROM {FA} WHERE a.name = '{{airline}}'", AIRLINES, cap=7),
    t("join2", "medium", "How many flights depart from airports in {apcity}?",
      "SELECT COUNT(*) FROM flights f JOIN airports ap ON ap.code = f.origin "
      "WHERE ap.city = '{apcity}'", "SELECT DISTINCT city AS apcity FROM airports ORDER BY 1",
      cap=6),
    t("join2", "medium", "How many bookings were made for flights departing from {ap}?",
      f"SELECT COUNT(*) FROM {BF} WHERE f.origin = '{{ap}}'", AIRPORTS, cap=7),
    t("join2", "medium", "What is the total revenue (sum of booking prices) of flights operated "
      "by {airline}, rounded to 2 decimals?",
      f"SELECT {{ROUND2(SUM(b.price))}} FROM {BF} JOIN airlines a "
      "ON a.airline_id = f.airline_id WHERE a.name = '{airline}'", AIRLINES, cap=4),
    t("join2", "medium", "List the flight number and status of the flights of {airline} that "
      "depart from {ap}, sorted by flight number, then flight id.",
      f"SELECT f.flight_number, f.status FROM {FA} WHERE a.name = '{{airline}}' "
      "AND f.origin = '{ap}' ORDER BY f.flight_number, f.flight_id", AIRLINES, AIRPORTS, cap=3),
    t("group_having", "medium", "For each fare class, how many bookings are there and what is "
      "their average price? Return the fare class, the count and the average price rounded to "
      "2 decimals.", "SELECT fare_class, COUNT(*), {ROUND2(AVG(price))} FROM bookings "
      "GROUP BY fare_class"),
    t("group_having", "medium", "Which origin airports have more than {n} departing flights? "
      "Return the airport code and the number of flights.",
      "SELECT origin, COUNT(*) FROM flights GROUP BY origin HAVING COUNT(*) > {n}",
      nums("n", 10, 12, 14, 16), cap=3),
    t("group_having", "medium", "For each nationality, how many passengers are there? Return "
      "the nationality and the count.",
      "SELECT nationality, COUNT(*) FROM passengers GROUP BY nationality"),
    t("group_having", "medium", "For each flight status, what is the average flight duration in "
      "minutes in {year}? Return the status and the average rounded to 2 decimals.",
      "SELECT status, {ROUND2(AVG(duration_minutes))} FROM flights "
      "WHERE {YEAR(departure_date)} = {year} GROUP BY status", YEARS, cap=2),
    t("date", "medium", "How many flights departed in {month_name} {year}?",
      "SELECT COUNT(*) FROM flights WHERE {YEAR(departure_date)} = {year} "
      "AND {MONTH(departure_date)} = {month}", YEARS, MONTHS, cap=8),
    t("date", "medium", "How many bookings were made more than {d} days before the flight's "
      "departure date?", f"SELECT COUNT(*) FROM {BF} "
      "WHERE {DAYS(b.booked_on, f.departure_date)} > {d}", nums("d", 60, 90, 120), cap=3),
    t("date", "medium", "For each month of {year}, how many flights departed? Return the month "
      "number (1-12) and the count, ordered by month.",
      "SELECT {MONTH(departure_date)} AS m, COUNT(*) FROM flights "
      "WHERE {YEAR(departure_date)} = {year} GROUP BY {MONTH(departure_date)} ORDER BY m",
      YEARS, cap=2),
    t("null", "medium", "What is the total delay in minutes of the flights from {ap}, counting "
      "a missing delay as 0?", "SELECT SUM(COALESCE(delay_minutes, 0)) FROM flights "
      "WHERE origin = '{ap}'", AIRPORTS, cap=3),
    t("order_limit", "medium", "Which {n} routes (origin and destination airport codes) have the "
      "most flights? Return the origin, the destination and the number of flights, most "
      "flights first, breaking ties by origin, then destination.",
      "SELECT origin, destination, COUNT(*) AS n FROM flights GROUP BY origin, destination "
      "ORDER BY n DESC, origin, destination LIMIT {n}", nums("n", 3, 5), cap=2),
    # ---------------------------------------------------------------- hard
    t("join3", "hard", "How many bookings were made by passengers with the nationality '{nat}' "
      "on flights operated by {airline}?",
      f"SELECT COUNT(*) FROM {BF} JOIN airlines a ON a.airline_id = f.airline_id JOIN "
      "passengers p ON p.passenger_id = b.passenger_id WHERE p.nationality = '{nat}' "
      "AND a.name = '{airline}'", NATS, AIRLINES, cap=6),
    t("join3", "hard", "List the first and last names of the passengers who flew from {ap} in "
      "'{fare}' class, sorted by last name, then first name, then passenger id, without "
      "listing a passenger twice.",
      f"SELECT DISTINCT p.first_name, p.last_name, p.passenger_id FROM {BF} JOIN passengers p "
      "ON p.passenger_id = b.passenger_id WHERE f.origin = '{ap}' AND b.fare_class = '{fare}' "
      "ORDER BY p.last_name, p.first_name, p.passenger_id", AIRPORTS, FARES, cap=4),
    t("join3", "hard", "For each airline, what is the total revenue (sum of booking prices) of "
      "its flights departing from airports in {country}? Return the airline name and the "
      "revenue rounded to 2 decimals.",
      f"SELECT a.name, {{ROUND2(SUM(b.price))}} FROM {BF} JOIN airlines a "
      "ON a.airline_id = f.airline_id JOIN airports ap ON ap.code = f.origin "
      "WHERE ap.country = '{country}' GROUP BY a.airline_id, a.name",
      "SELECT DISTINCT country FROM airports ORDER BY 1", cap=4),
    t("subquery", "hard", "How many passengers with the nationality '{nat}' have never made a "
      "booking?", "SELECT COUNT(*) FROM passengers p WHERE p.nationality = '{nat}' AND NOT EXISTS "
      "(SELECT 1 FROM bookings b WHERE b.passenger_id = p.passenger_id)", NATS, cap=4),
    t("subquery", "hard", "How many flights from {ap} are longer than the average distance of "
      "all flights?", "SELECT COUNT(*) FROM flights WHERE origin = '{ap}' AND distance_km > "
      "(SELECT AVG(distance_km) FROM flights)", AIRPORTS, cap=3),
    t("subquery", "hard", "List the booking id and price of the '{fare}' bookings that cost more "
      "than the average price of their fare class, on flights from {ap}.",
      f"SELECT b.booking_id, b.price FROM {BF} WHERE b.fare_class = '{{fare}}' "
      "AND f.origin = '{ap}' AND b.price > (SELECT AVG(b2.price) FROM bookings b2 "
      "WHERE b2.fare_class = b.fare_class)", FARES, AIRPORTS, cap=3),
    t("subquery", "hard", "List the ids of the flights operated by {airline} that have no "
      "bookings at all, in increasing order.",
      f"SELECT f.flight_id FROM {FA} WHERE a.name = '{{airline}}' AND f.flight_id NOT IN "
      "(SELECT flight_id FROM bookings) ORDER BY f.flight_id", AIRLINES, cap=3),
    t("group_having", "hard", "Which passengers have spent more than {x} in total on bookings? "
      "Return the passenger id, last name and total spent rounded to 2 decimals.",
      "SELECT p.passenger_id, p.last_name, {ROUND2(SUM(b.price))} FROM passengers p "
      "JOIN bookings b ON b.passenger_id = p.passenger_id GROUP BY p.passenger_id, p.last_name "
      "HAVING SUM(b.price) > {x}", nums("x", 3000, 4000, 5000), cap=3),
    t("order_limit", "hard", "Which airline earned the most booking revenue in {year} (by "
      "departure date)? Return the airline name and the revenue rounded to 2 decimals.",
      f"SELECT a.name, {{ROUND2(SUM(b.price))}} FROM {BF} JOIN airlines a "
      "ON a.airline_id = f.airline_id WHERE {YEAR(f.departure_date)} = {year} "
      "GROUP BY a.airline_id, a.name ORDER BY SUM(b.price) DESC, a.airline_id LIMIT 1",
      YEARS, cap=2),
    t("order_limit", "hard", "List the {n} passengers with the most bookings: passenger id, "
      "last name and number of bookings, most bookings first, breaking ties by passenger id.",
      "SELECT p.passenger_id, p.last_name, COUNT(*) AS n FROM passengers p JOIN bookings b "
      "ON b.passenger_id = p.passenger_id GROUP BY p.passenger_id, p.last_name "
      "ORDER BY n DESC, p.passenger_id LIMIT {n}", nums("n", 3, 5), cap=2),
    t("date", "hard", "For each airline, how many of its flights in {month_name} {year} were "
      "delayed or cancelled? Return the airline name and the count.",
      f"SELECT a.name, COUNT(*) FROM {FA} WHERE f.status IN ('delayed', 'cancelled') "
      "AND {YEAR(f.departure_date)} = {year} AND {MONTH(f.departure_date)} = {month} "
      "GROUP BY a.airline_id, a.name", YEARS, MONTHS, cap=3),
    t("date", "hard", "How many distinct passengers were less than {days} days old (about "
      "{age} years) on the departure date of at least one of their booked flights?",
      f"SELECT COUNT(DISTINCT p.passenger_id) FROM {BF} JOIN passengers p "
      "ON p.passenger_id = b.passenger_id WHERE {DAYS(p.birth_date, f.departure_date)} < {days}",
      [{"age": 18, "days": 6574}, {"age": 25, "days": 9131}, {"age": 30, "days": 10957}], cap=2),
    t("null", "hard", "For each airline, how many of its bookings have no seat assigned? Return "
      "the airline name and the count, leaving out airlines with none.",
      f"SELECT a.name, COUNT(*) FROM {BF} JOIN airlines a ON a.airline_id = f.airline_id "
      "WHERE b.seat IS NULL GROUP BY a.airline_id, a.name"),
)  # fmt: skip
