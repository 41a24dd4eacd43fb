"""Question templates for the ``library`` schema."""

from __future__ import annotations

from .base import MONTHS, Template, nums, t

GENRES = "SELECT name AS genre FROM genres ORDER BY name"
CITIES = "SELECT DISTINCT city FROM members ORDER BY city"
COUNTRIES = "SELECT DISTINCT country FROM authors ORDER BY country"
LANGS = "SELECT DISTINCT language AS lang FROM books ORDER BY 1"
KINDS = "SELECT DISTINCT membership AS kind FROM members ORDER BY 1"
YEARS = nums("year", 2022, 2023, 2024)
BG = "books b JOIN genres g ON g.genre_id = b.genre_id"
LB = "loans l JOIN books b ON b.book_id = l.book_id"

TEMPLATES: tuple[Template, ...] = (
    # ---------------------------------------------------------------- easy
    t("filter", "easy", "List the titles of the books published before {year}, in alphabetical "
      "order.", "SELECT title FROM books WHERE published_year < {year} ORDER BY title",
      nums("year", 1905, 1910, 1920, 1930, 1950), cap=4),
    t("filter", "easy", "How many books were published after {year}?",
      "SELECT COUNT(*) FROM books WHERE published_year > {year}",
      nums("year", 1950, 1980, 2000, 2010, 2020), cap=4),
    t("filter", "easy", "How many books are written in {lang}?",
      "SELECT COUNT(*) FROM books WHERE language = '{lang}'", LANGS, cap=5),
    t("filter", "easy", "How many members live in {city}?",
      "SELECT COUNT(*) FROM members WHERE city = '{city}'", CITIES, cap=4),
    t("filter", "easy", "List the names of the members who live in {city}, in alphabetical "
      "order.", "SELECT name FROM members WHERE city = '{city}' ORDER BY name", CITIES, cap=5),
    t("filter", "easy", "How many members have a '{kind}' membership?",
      "SELECT COUNT(*) FROM members WHERE membership = '{kind}'", KINDS, cap=3),
    t("filter", "easy", "How many authors are from {country}?",
      "SELECT COUNT(*) FROM authors WHERE country = '{country}'", COUNTRIES, cap=5),
    t("filter", "easy", "List the title and page count of the books with more than {p} pages, "
      "longest first, breaking ties by book id.",
      "SELECT title, pages FROM books WHERE pages > {p} ORDER BY pages DESC, book_id",
      nums("p", 800, 850, 880), cap=3),
    t("filter", "easy", "How many books have a title starting with '{word}'?",
      "SELECT COUNT(*) FROM books WHERE substr(title, 1, {n}) = '{word}'",
      [{"word": w, "n": len(w)} for w in ("The Lost", "The Silent", "The Golden", "River",
                                          "Garden", "Empire", "The Wild")], cap=4),
    t("aggregate", "easy", "What is the average number of pages of the books written in {lang}, "
      "rounded to 2 decimals (books without a page count are ignored)?",
      "SELECT {ROUND2(AVG(pages))} FROM books WHERE language = '{lang}'", LANGS, cap=3),
    t("aggregate", "easy", "What is the total of all fines paid, rounded to 2 decimals?",
      "SELECT {ROUND2(SUM(fine))} FROM loans"),
    t("aggregate", "easy", "What are the earliest and the latest publication years of the books "
      "written in {lang}? Return the minimum and the maximum.",
      "SELECT MIN(published_year), MAX(published_year) FROM books WHERE language = '{lang}'",
      LANGS, cap=2),
    t("aggregate", "easy", "What is the average fine of the loans that were charged one, "
      "rounded to 2 decimals?", "SELECT {ROUND2(AVG(fine))} FROM loans WHERE fine IS NOT NULL"),
    t("null", "easy", "How many {what}?", "SELECT COUNT(*) FROM {tab} WHERE {col} IS NULL",
      [{"what": "books have no ISBN", "tab": "books", "col": "isbn"},
       {"what": "books have an unknown page count (pages is NULL)", "tab": "books",
        "col": "pages"},
       {"what": "authors have an unknown birth year", "tab": "authors", "col": "birth_year"},
       {"what": "members have no email address", "tab": "members", "col": "email"},
       {"what": "loans have not been returned yet (return_date is NULL)", "tab": "loans",
        "col": "return_date"}], cap=5),
    t("null", "easy", "List the name and email of the members who live in {city}, showing "
      "'no email' when the email is missing.",
      "SELECT name, COALESCE(email, 'no email') FROM members WHERE city = '{city}'",
      CITIES, cap=3),
    t("null", "easy", "How many loans were charged a fine (fine is not NULL)?",
      "SELECT COUNT(*) FROM loans WHERE fine IS NOT NULL"),
    t("date", "easy", "How many loans started in {year}?",
      "SELECT COUNT(*) FROM loans WHERE {YEAR(loan_date)} = {year}", YEARS, cap=3),
    t("date", "easy", "How many members joined the library in {year}?",
      "SELECT COUNT(*) FROM members WHERE {YEAR(joined_date)} = {year}",
      nums("year", 2015, 2017, 2019, 2021, 2023), cap=4),
    t("date", "easy", "List the ids of the loans that started on {day}, in increasing order.",
      "SELECT loan_id FROM loans WHERE loan_date = '{day}' ORDER BY loan_id",
      "SELECT DISTINCT CAST(loan_date AS TEXT) AS day FROM loans ORDER BY 1", cap=3),
    t("order_limit", "easy", "List the title and publication year of the {n} oldest books, "
      "oldest first, breaking ties by book id.",
      "SELECT title, published_year FROM books ORDER BY published_year, book_id LIMIT {n}",
      nums("n", 3, 5, 10), cap=3),
    # ---------------------------------------------------------------- medium
    t("join2", "medium", "How many books are in the '{genre}' genre?",
      f"SELECT COUNT(*) FROM {BG} WHERE g.name = '{{genre}}'", GENRES, cap=7),
    t("join2", "medium", "List the titles of the '{genre}' books published after {year}, in "
      "alphabetical order.",
      f"SELECT b.title FROM {BG} WHERE g.name = '{{genre}}' AND b.published_year > {{year}} "
      "ORDER BY b.title", GENRES, nums("year", 1990, 2010), cap=4),
    t("join2", "medium", "How many books were written by authors from {country}?",
      "SELECT COUNT(*) FROM books b JOIN authors a ON a.author_id = b.author_id "
      "WHERE a.country = '{country}'", COUNTRIES, cap=6),
    t("join2", "medium", "How many loans were made by members living in {city}?",
      "SELECT COUNT(*) FROM loans l JOIN members m ON m.member_id = l.member_id "
      "WHERE m.city = '{city}'", CITIES, cap=6),
    t("join2", "medium", "List the title of every book borrowed by the member with id {mid}, "
      "in alphabetical order, listing a title once.",
      f"SELECT DISTINCT b.title FROM {LB} WHERE l.member_id = {{mid}} ORDER BY b.title",
      "SELECT DISTINCT member_id AS mid FROM loans ORDER BY 1", cap=3),
    t("group_having", "medium", "For each genre, how many books does it have? Return the genre "
      "name and the count.", f"SELECT g.name, COUNT(*) FROM {BG} GROUP BY g.genre_id, g.name"),
    t("group_having", "medium", "Which authors have written more than {n} books? Return the "
      "author id, name and number of books.",
      "SELECT a.author_id, a.name, COUNT(*) FROM authors a JOIN books b "
      "ON b.author_id = a.author_id GROUP BY a.author_id, a.name HAVING COUNT(*) > {n}",
      nums("n", 4, 5, 6, 7), cap=3),
    t("group_having", "medium", "For each membership type, how many members joined in {year} "
      "or later? Return the membership type and the count.",
      "SELECT membership, COUNT(*) FROM members WHERE {YEAR(joined_date)} >= {year} "
      "GROUP BY membership", nums("year", 2018, 2020, 2022), cap=2),
    t("group_having", "medium", "Which languages have more than {n} books? Return the language "
      "and the number of books.",
      "SELECT language, COUNT(*) FROM books GROUP BY language HAVING COUNT(*) > {n}",
      nums("n", 15, 20, 25), cap=2),
    t("date", "medium", "How many loans started in {month_name} {year}?",
      "SELECT COUNT(*) FROM loans WHERE {YEAR(loan_date)} = {year} "
      "AND {MONTH(loan_date)} = {month}", YEARS, MONTHS, cap=8),
    t("date", "medium", "How many returned loans were kept for more than {d} days (from loan "
      "date to return date)?",
      "SELECT COUNT(*) FROM loans WHERE return_date IS NOT NULL "
      "AND {DAYS(loan_date, return_date)} > {d}", nums("d", 14, 21, 30, 40), cap=3),
    t("date", "medium", "For each month of {year}, how many loans started? Return the month "
      "number (1-12) and the count, ordered by month.",
      "SELECT {MONTH(loan_date)} AS m, COUNT(*) FROM loans WHERE {YEAR(loan_date)} = {year} "
      "GROUP BY {MONTH(loan_date)} ORDER BY m", YEARS, cap=2),
    t("null", "medium", "For each membership type, what is the total of the fines paid by its "
      "members, counting loans without a fine as 0? Return the membership type and the total "
      "rounded to 2 decimals.",
      "SELECT m.membership, {ROUND2(SUM(COALESCE(l.fine, 0)))} FROM members m JOIN loans l "
      "ON l.member_id = m.member_id GROUP BY m.membership"),
    t("null", "medium", "How many books in the '{genre}' genre have no ISBN?",
      f"SELECT COUNT(*) FROM {BG} WHERE g.name = '{{genre}}' AND b.isbn IS NULL", GENRES, cap=3),
    t("order_limit", "medium", "Which {n} books were borrowed most often? Return the book id, "
      "title and number of loans, most loans first, breaking ties by book id.",
      f"SELECT b.book_id, b.title, COUNT(*) AS n FROM {LB} GROUP BY b.book_id, b.title "
      "ORDER BY n DESC, b.book_id LIMIT {n}", nums("n", 3, 5), cap=2),
    # ---------------------------------------------------------------- hard
    t("join3", "hard", "How many loans were made of '{genre}' books by members living in "
      "{city}?",
      f"SELECT COUNT(*) FROM {LB} JOIN genres g ON g.genre_id = b.genre_id JOIN members m "
      "ON m.member_id = l.member_id WHERE g.name = '{genre}' AND m.city = '{city}'",
      GENRES, CITIES, cap=6),
    t("join3", "hard", "List the names of the members who borrowed a book by an author from "
      "{country}, in alphabetical order, without duplicates.",
      f"SELECT DISTINCT m.name FROM {LB} JOIN authors a ON a.author_id = b.author_id "
      "JOIN members m ON m.member_id = l.member_id WHERE a.country = '{country}' "
      "ORDER BY m.name", COUNTRIES, cap=3),
    t("join3", "hard", "For each genre, how many loans started in {year}? Return the genre name "
      "and the count.",
      f"SELECT g.name, COUNT(*) FROM {LB} JOIN genres g ON g.genre_id = b.genre_id "
      "WHERE {YEAR(l.loan_date)} = {year} GROUP BY g.genre_id, g.name", YEARS, cap=2),
    t("subquery", "hard", "How many books have never been borrowed?",
      "SELECT COUNT(*) FROM books b WHERE NOT EXISTS "
      "(SELECT 1 FROM loans l WHERE l.book_id = b.book_id)"),
    t("subquery", "hard", "List the titles of the '{genre}' books that have never been "
      "borrowed, in alphabetical order.",
      f"SELECT b.title FROM {BG} WHERE g.name = '{{genre}}' AND b.book_id NOT IN "
      "(SELECT book_id FROM loans) ORDER BY b.title", GENRES, cap=3),
    t("subquery", "hard", "How many '{genre}' books have more pages than the average page count "
      "of all books?",
      f"SELECT COUNT(*) FROM {BG} WHERE g.name = '{{genre}}' AND b.pages > "
      "(SELECT AVG(pages) FROM books)", GENRES, cap=4),
    t("subquery", "hard", "How many members from {city} have borrowed at least one '{genre}' "
      "book?",
      "SELECT COUNT(*) FROM members m WHERE m.city = '{city}' AND m.member_id IN "
      f"(SELECT l.member_id FROM {LB} JOIN genres g ON g.genre_id = b.genre_id "
      "WHERE g.name = '{genre}')", CITIES, GENRES, cap=6),
    t("subquery", "hard", "List the book id and title of the books whose page count is the "
      "largest within their genre, for the '{genre}' genre.",
      f"SELECT b.book_id, b.title FROM {BG} WHERE g.name = '{{genre}}' AND b.pages = "
      "(SELECT MAX(b2.pages) FROM books b2 WHERE b2.genre_id = b.genre_id)", GENRES, cap=3),
    t("group_having", "hard", "Which members have paid more than {x} in fines in total? Return "
      "the member id, name and total fines rounded to 2 decimals.",
      "SELECT m.member_id, m.name, {ROUND2(SUM(l.fine))} FROM members m JOIN loans l "
      "ON l.member_id = m.member_id GROUP BY m.member_id, m.name HAVING SUM(l.fine) > {x}",
      nums("x", 3, 5, 8), cap=3),
    t("order_limit", "hard", "Which author's books were borrowed most often in {year}? Return "
      "the author name and the number of loans; if several are tied, return the one with the "
      "smallest author id.",
      f"SELECT a.name, COUNT(*) AS n FROM {LB} JOIN authors a ON a.author_id = b.author_id "
      "WHERE {YEAR(l.loan_date)} = {year} GROUP BY a.author_id, a.name "
      "ORDER BY n DESC, a.author_id LIMIT 1", YEARS, cap=3),
    t("date", "hard", "How many loans of '{genre}' books were returned after their due date?",
      f"SELECT COUNT(*) FROM {LB} JOIN genres g ON g.genre_id = b.genre_id "
      "WHERE g.name = '{genre}' AND l.return_date > l.due_date", GENRES, cap=4),
    t("date", "hard", "For each city, how many loans that started in {year} are still out (not "
      "returned)? Return the city and the count, leaving out cities with none.",
      "SELECT m.city, COUNT(*) FROM loans l JOIN members m ON m.member_id = l.member_id "
      "WHERE l.return_date IS NULL AND {YEAR(l.loan_date)} = {year} GROUP BY m.city",
      YEARS, cap=2),
    t("null", "hard", "For each author country, how many books have an unknown page count or "
      "no ISBN? Return the country and the count, leaving out countries with none.",
      "SELECT a.country, COUNT(*) FROM books b JOIN authors a ON a.author_id = b.author_id "
      "WHERE b.pages IS NULL OR b.isbn IS NULL GROUP BY a.country"),
)  # fmt: skip
