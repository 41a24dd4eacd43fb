"""``hr``: a company's departments, jobs, employees (with managers), projects and pay rises."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import sqlalchemy as sa

from ._common import FIRST_NAMES, LAST_NAMES, Rows, SchemaDef, maybe, rand_date, text

__all__ = ["DEPARTMENTS", "JOBS", "SCHEMA"]

#: (department name, city)
DEPARTMENTS: tuple[tuple[str, str], ...] = (
    ("Engineering", "Berlin"), ("Sales", "Paris"), ("Marketing", "Paris"),
    ("Finance", "London"), ("Human Resources", "London"), ("Support", "Lisbon"),
    ("Research", "Zurich"), ("Operations", "Madrid"),
)  # fmt: skip
#: (job title, min salary, max salary, earns commission)
JOBS: tuple[tuple[str, int, int, bool], ...] = (
    ("Software Engineer", 55000, 110000, False), ("Data Analyst", 45000, 85000, False),
    ("Sales Representative", 35000, 70000, True), ("Account Manager", 50000, 95000, True),
    ("Accountant", 42000, 80000, False), ("Recruiter", 38000, 65000, False),
    ("Support Specialist", 30000, 55000, False), ("Research Scientist", 60000, 120000, False),
    ("Project Manager", 58000, 105000, False), ("Director", 90000, 180000, False),
)  # fmt: skip
PROJECT_NAMES = (
    "Falcon", "Orion", "Atlas", "Phoenix", "Nimbus", "Aurora", "Titan", "Zephyr",
    "Comet", "Delta", "Everest", "Harbor",
)  # fmt: skip
ROLES = ("lead", "developer", "analyst", "tester", "advisor")
REASONS = ("promotion", "annual review", "market adjustment", "retention")

metadata = sa.MetaData()

sa.Table(
    "departments", metadata,
    sa.Column("department_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", text(), nullable=False, unique=True),
    sa.Column("city", text(), nullable=False),
    sa.Column("budget", sa.Float, nullable=False),
)  # fmt: skip
sa.Table(
    "jobs", metadata,
    sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("title", text(), nullable=False, unique=True),
    sa.Column("min_salary", sa.Integer, nullable=False),
    sa.Column("max_salary", sa.Integer, nullable=False),
)  # fmt: skip
sa.Table(
    "employees", metadata,
    sa.Column("employee_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("first_name", text(), nullable=False),
    sa.Column("last_name", text(), nullable=False),
    sa.Column("email", text(), nullable=True),
    sa.Column("hire_date", sa.Date, nullable=False),
    sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.job_id"), nullable=False),
    sa.Column("department_id", sa.Integer, sa.ForeignKey("departments.department_id"),
              nullable=True),
    sa.Column("manager_id", sa.Integer, sa.ForeignKey("employees.employee_id"), nullable=True),
    sa.Column("salary", sa.Float, nullable=False),
    sa.Column("commission_pct", sa.Float, nullable=True),
)  # fmt: skip
sa.Table(
    "projects", metadata,
    sa.Column("project_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", text(), nullable=False),
    sa.Column("department_id", sa.Integer, sa.ForeignKey("departments.department_id"),
              nullable=False),
    sa.Column("start_date", sa.Date, nullable=False),
    sa.Column("end_date", sa.Date, nullable=True),
    sa.Column("budget", sa.Float, nullable=False),
)  # fmt: skip
sa.Table(
    "assignments", metadata,
    sa.Column("assignment_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("employee_id", sa.Integer, sa.ForeignKey("employees.employee_id"),
              nullable=False),
    sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.project_id"), nullable=False),
    sa.Column("role", text(), nullable=False),
    sa.Column("hours", sa.Integer, nullable=False),
)  # fmt: skip
sa.Table(
    "salary_changes", metadata,
    sa.Column("change_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("employee_id", sa.Integer, sa.ForeignKey("employees.employee_id"),
              nullable=False),
    sa.Column("change_date", sa.Date, nullable=False),
    sa.Column("old_salary", sa.Float, nullable=False),
    sa.Column("new_salary", sa.Float, nullable=False),
    sa.Column("reason", text(), nullable=True),
)  # fmt: skip


def generate(rng: random.Random, scale: int) -> Rows:
    """Rows for every hr table (about 840 rows per unit of ``scale``)."""
    departments = [
        {"department_id": i, "name": name, "city": city,
         "budget": round(rng.uniform(200_000, 2_000_000), 2)}
        for i, (name, city) in enumerate(DEPARTMENTS, start=1)
    ]  # fmt: skip
    jobs = [
        {"job_id": i, "title": t, "min_salary": lo, "max_salary": hi}
        for i, (t, lo, hi, _) in enumerate(JOBS, start=1)
    ]
    employees: list[dict[str, Any]] = []
    n_emp = 150 * scale
    for i in range(1, n_emp + 1):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        job = rng.randrange(len(JOBS))
        _, lo, hi, commission = JOBS[job]
        manager = None
        if i > len(DEPARTMENTS) and rng.random() > 0.03:
            manager = rng.randint(1, min(i - 1, max(len(DEPARTMENTS), i // 4)))
        email = f"{first[0]}{last.replace(' ', '')}{i}@corp.example".lower()
        employees.append({
            "employee_id": i, "first_name": first, "last_name": last,
            "email": maybe(rng, 0.1, email),
            "hire_date": rand_date(rng, dt.date(2010, 1, 1), dt.date(2024, 6, 30)),
            "job_id": job + 1,
            "department_id": maybe(rng, 0.05, rng.randint(1, len(DEPARTMENTS))),
            "manager_id": manager, "salary": round(rng.uniform(lo, hi), 2),
            "commission_pct": round(rng.uniform(0.05, 0.3), 2) if commission else None,
        })  # fmt: skip
    projects: list[dict[str, Any]] = []
    for i in range(1, 25 * scale + 1):
        start = rand_date(rng, dt.date(2019, 1, 1), dt.date(2024, 6, 30))
        end = maybe(rng, 0.3, start + dt.timedelta(days=rng.randint(30, 600)))
        projects.append({
            "project_id": i, "name": f"Project {rng.choice(PROJECT_NAMES)} {i}",
            "department_id": rng.randint(1, len(DEPARTMENTS)), "start_date": start,
            "end_date": end, "budget": round(rng.uniform(20_000, 500_000), 2),
        })  # fmt: skip
    assignments: list[dict[str, Any]] = []
    seen: set[tuple[int, int]] = set()
    while len(assignments) < 350 * scale:
        pair = (rng.randint(1, n_emp), rng.randint(1, len(projects)))
        if pair in seen:
            continue
        seen.add(pair)
        assignments.append({
            "assignment_id": len(assignments) + 1, "employee_id": pair[0],
            "project_id": pair[1], "role": rng.choice(ROLES), "hours": rng.randint(5, 400),
        })  # fmt: skip
    changes: list[dict[str, Any]] = []
    for i in range(1, 300 * scale + 1):
        emp = rng.randint(1, n_emp)
        old = round(employees[emp - 1]["salary"] * rng.uniform(0.8, 0.97), 2)
        changes.append({
            "change_id": i, "employee_id": emp,
            "change_date": rand_date(rng, dt.date(2015, 1, 1), dt.date(2024, 6, 30)),
            "old_salary": old, "new_salary": round(old * rng.uniform(1.02, 1.15), 2),
            "reason": maybe(rng, 0.25, rng.choice(REASONS)),
        })  # fmt: skip
    return {
        "departments": departments, "jobs": jobs, "employees": employees,
        "projects": projects, "assignments": assignments, "salary_changes": changes,
    }  # fmt: skip


SCHEMA = SchemaDef(
    name="hr",
    description=(
        "A company's staff records. `departments` (department_id, name, city, budget) and "
        "`jobs` (job_id, title, min_salary, max_salary) describe the organisation. "
        "`employees` (employee_id, first_name, last_name, email or NULL, hire_date, job_id, "
        "department_id or NULL when unassigned, manager_id: the employee_id of their "
        "manager or NULL, salary, commission_pct: NULL except for commissioned jobs) work "
        "on `projects` (project_id, name, department_id, start_date, end_date: NULL while "
        "running, budget) through `assignments` (assignment_id, employee_id, project_id, "
        "role, hours). `salary_changes` (change_id, employee_id, change_date, old_salary, "
        "new_salary, reason or NULL) records pay changes. Dates are DATE values."
    ),
    metadata=metadata,
    generate=generate,
)
