r"""Seeded math problems whose answers are computed, never written by hand.

Each template draws its numbers from a generator seeded by ``(template, index)``, builds
the question, and computes the answer exactly (``fractions.Fraction``, integer
arithmetic), then writes it as LaTeX: an integer, ``\frac{p}{q}``, a set ``\{a, b\}`` or
an interval. So a task's gold is as right as Python's integers, and a new template is a
function, not a list of hand-checked answers. Some templates (counting primes, modular
powers, long series) are meant to be computed with the ``run_python`` tool.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from fractions import Fraction

from ..tasks import Task

__all__ = ["TEMPLATES", "builtin_tasks", "latex"]

Problem = tuple[str, str, str]  # (question, gold LaTeX, difficulty)


def latex(value: Fraction | int) -> str:
    r"""An exact number as LaTeX: ``7``, ``-\frac{3}{4}``."""
    q = Fraction(value)
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def _nonzero(rng: random.Random, lo: int, hi: int) -> int:
    return rng.choice([v for v in range(lo, hi + 1) if v != 0])


def _fraction_sum(rng: random.Random) -> Problem:
    a, c = rng.randint(1, 9), rng.randint(1, 9)
    b, d = rng.randint(2, 12), rng.randint(2, 12)
    op = rng.choice(["+", "-"])
    value = Fraction(a, b) + Fraction(c, d) if op == "+" else Fraction(a, b) - Fraction(c, d)
    return (f"Compute $\\frac{{{a}}}{{{b}}} {op} \\frac{{{c}}}{{{d}}}$ as a fraction in lowest "
            "terms.", latex(value), "easy")


def _linear_equation(rng: random.Random) -> Problem:
    a, b, c = _nonzero(rng, -9, 9), rng.randint(-20, 20), rng.randint(-20, 20)
    x = Fraction(c - b, a)
    return f"Solve for $x$: ${a}x {'+' if b >= 0 else '-'} {abs(b)} = {c}$.", latex(x), "easy"


def _quadratic_roots(rng: random.Random) -> Problem:
    r1, r2 = rng.sample(range(-9, 10), 2)
    s, p = -(r1 + r2), r1 * r2
    poly = f"x^2 {'+' if s >= 0 else '-'} {abs(s)}x {'+' if p >= 0 else '-'} {abs(p)} = 0"
    lo, hi = sorted((r1, r2))
    return (f"Find the set of all real solutions of ${poly}$.", f"\\{{{lo}, {hi}\\}}",
            "medium")


def _lcm(rng: random.Random) -> Problem:
    a, b = rng.randint(6, 120), rng.randint(6, 120)
    return (f"What is the least common multiple of {a} and {b}?", str(math.lcm(a, b)),
            "easy")


def _binomial(rng: random.Random) -> Problem:
    n = rng.randint(6, 30)
    k = rng.randint(2, n - 2)
    return (f"In how many ways can a committee of {k} be chosen from {n} people?",
            str(math.comb(n, k)), "medium")


def _modpow(rng: random.Random) -> Problem:
    a, e, m = rng.randint(2, 99), rng.randint(50, 5000), rng.randint(7, 97)
    return (f"What is the remainder when ${a}^{{{e}}}$ is divided by {m}?", str(pow(a, e, m)),
            "hard")


def _arithmetic_series(rng: random.Random) -> Problem:
    a, d, n = rng.randint(-20, 20), _nonzero(rng, -7, 7), rng.randint(10, 200)
    total = n * (2 * a + (n - 1) * d) // 2
    return (f"An arithmetic sequence starts at {a} and each term is {d} more than the one "
            f"before. What is the sum of its first {n} terms?", str(total), "medium")


def _percentage(rng: random.Random) -> Problem:
    part, pct = rng.randint(3, 400), rng.choice([4, 5, 8, 12, 15, 16, 20, 25, 30, 40, 75])
    return (f"{part} is {pct}\\% of what number?", latex(Fraction(part * 100, pct)), "easy")


def _inequality(rng: random.Random) -> Problem:
    a, b, c = _nonzero(rng, -8, 8), rng.randint(-15, 15), rng.randint(-15, 15)
    v = Fraction(c - b, a)
    interval = f"(-\\infty, {latex(v)})" if a > 0 else f"({latex(v)}, \\infty)"
    return (f"Solve ${a}x {'+' if b >= 0 else '-'} {abs(b)} < {c}$ for $x$ and give the "
            "solution set as an interval.", interval, "medium")


def _prime_count(rng: random.Random) -> Problem:
    n = rng.randint(100, 3000)
    sieve = bytearray([1]) * (n + 1)
    sieve[0:2] = b"\0\0"
    for i in range(2, math.isqrt(n) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
    return f"How many prime numbers are less than or equal to {n}?", str(sum(sieve)), "hard"


def _digit_sum(rng: random.Random) -> Problem:
    base, e = rng.randint(2, 9), rng.randint(20, 120)
    return (f"What is the sum of the decimal digits of ${base}^{{{e}}}$?",
            str(sum(map(int, str(base**e)))), "hard")


#: Template name -> generator of one problem.
TEMPLATES: dict[str, Callable[[random.Random], Problem]] = {
    "fraction_sum": _fraction_sum,
    "linear_equation": _linear_equation,
    "quadratic_roots": _quadratic_roots,
    "lcm": _lcm,
    "binomial": _binomial,
    "modpow": _modpow,
    "arithmetic_series": _arithmetic_series,
    "percentage": _percentage,
    "inequality": _inequality,
    "prime_count": _prime_count,
    "digit_sum": _digit_sum,
}


def builtin_tasks(per_template: int = 30, seed: int = 0) -> list[Task]:
    """``per_template`` tasks of every template, reproducible from ``seed``.

    A string seed is hashed with SHA-512 by ``random.Random``: the same tasks on every
    machine and Python version.
    """
    tasks = []
    for name, make in TEMPLATES.items():
        for i in range(per_template):
            question, gold, difficulty = make(random.Random(f"math-v0:{seed}:{name}:{i}"))
            tasks.append(Task(id=f"{name}-{i:03d}", prompt=question, gold=gold,
                              meta={"category": name, "difficulty": difficulty}))
    return tasks
