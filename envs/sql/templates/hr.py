"""Question templates for the ``hr`` schema."""

from __future__ import annotations

from .base import MONTHS, Template, nums, t

DEPTS = "SELECT name AS dept FROM departments ORDER BY name"
JOBS = "SELECT title AS job FROM jobs ORDER BY title"
FIRST = "SELECT DISTINCT first_name AS first FROM employees ORDER BY 1"
LAST = "SELECT DISTINCT last_name AS last FROM employees ORDER BY 1"
ROLES = "SELECT DISTINCT role FROM assignments ORDER BY role"
HIRE_YEARS = nums("year", 2012, 2015, 2018, 2020, 2022, 2023)
EMP = "employees e JOIN departments d ON d.department_id = e.department_id"

TEMPLATES: tuple[Template, ...] = (
    # ---------------------------------------------------------------- easy
    t("filter", "easy", "How many employees have the first name {first}?",
      "SELECT COUNT(*) FROM employees WHERE first_name = '{first}'", FIRST, cap=4),
    t("filter", "easy", "List the first and last names of the employees whose last name is "
      "{last}, sorted by first name, then by employee id.",
      "SELECT first_name, last_name FROM employees WHERE last_name = '{last}' "
      "ORDER BY first_name, employee_id", LAST, cap=5),
    t("filter", "easy", "How many employees earn more than {s}?",
      "SELECT COUNT(*) FROM employees WHERE salary > {s}",
      nums("s", 50000, 70000, 90000, 110000, 150000), cap=4),
    t("filter", "easy", "List the employee id and salary of the employees who earn between "
      "{lo} and {hi} (inclusive), sorted by salary from highest to lowest, then by employee id.",
      "SELECT employee_id, salary FROM employees WHERE salary BETWEEN {lo} AND {hi} "
      "ORDER BY salary DESC, employee_id",
      [{"lo": 60000, "hi": 62000}, {"lo": 100000, "hi": 105000}, {"lo": 40000, "hi": 41000},
       {"lo": 150000, "hi": 160000}], cap=3),
    t("filter", "easy", "List the ids of the employees who report to the manager with employee "
      "id {m}, in increasing order.",
      "SELECT employee_id FROM employees WHERE manager_id = {m} ORDER BY employee_id",
      "SELECT DISTINCT manager_id AS m FROM employees WHERE manager_id IS NOT NULL ORDER BY 1",
      cap=4),
    t("filter", "easy", "How many assignments have the role '{role}'?",
      "SELECT COUNT(*) FROM assignments WHERE role = '{role}'", ROLES, cap=4),
    t("aggregate", "easy", "What is the average salary of all employees, rounded to 2 decimals?",
      "SELECT {ROUND2(AVG(salary))} FROM employees"),
    t("aggregate", "easy", "What are the lowest and the highest salary of the employees? Return "
      "the minimum and the maximum.", "SELECT MIN(salary), MAX(salary) FROM employees"),
    t("aggregate", "easy", "What is the total number of hours of all assignments with the role "
      "'{role}'?", "SELECT SUM(hours) FROM assignments WHERE role = '{role}'", ROLES, cap=4),
    t("aggregate", "easy", "What is the total budget of the projects that started in {year} "
      "or later, rounded to 2 decimals?",
      "SELECT {ROUND2(SUM(budget))} FROM projects WHERE {YEAR(start_date)} >= {year}",
      nums("year", 2020, 2022, 2023, 2024), cap=3),
    t("aggregate", "easy", "What is the budget of the department named '{dept}'?",
      "SELECT budget FROM departments WHERE name = '{dept}'", DEPTS, cap=3),
    t("aggregate", "easy", "What is the average commission percentage of the employees who earn "
      "a commission, rounded to 2 decimals?",
      "SELECT {ROUND2(AVG(commission_pct))} FROM employees WHERE commission_pct IS NOT NULL"),
    t("null", "easy", "How many {what}?", "SELECT COUNT(*) FROM {tab} WHERE {col} IS NULL",
      [{"what": "employees have no email address", "tab": "employees", "col": "email"},
       {"what": "employees are not assigned to any department (department_id is NULL)",
        "tab": "employees", "col": "department_id"},
       {"what": "employees have no manager", "tab": "employees", "col": "manager_id"},
       {"what": "projects are still running (end_date is NULL)", "tab": "projects",
        "col": "end_date"},
       {"what": "salary changes have no recorded reason", "tab": "salary_changes",
        "col": "reason"}], cap=5),
    t("null", "easy", "How many employees earn a commission (commission_pct is not NULL)?",
      "SELECT COUNT(*) FROM employees WHERE commission_pct IS NOT NULL"),
    t("null", "easy", "List the employee id and email of the employees whose last name is "
      "{last}, showing 'none' when the email is missing.",
      "SELECT employee_id, COALESCE(email, 'none') FROM employees WHERE last_name = '{last}'",
      LAST, cap=4),
    t("date", "easy", "How many employees were hired in {year}?",
      "SELECT COUNT(*) FROM employees WHERE {YEAR(hire_date)} = {year}", HIRE_YEARS, cap=4),
    t("date", "easy", "How many employees were hired before {day}?",
      "SELECT COUNT(*) FROM employees WHERE hire_date < '{day}'",
      nums("day", "2012-01-01", "2015-07-01", "2018-03-15", "2020-01-01"), cap=3),
    t("date", "easy", "List the names of the projects that started in {year}, in alphabetical "
      "order.", "SELECT name FROM projects WHERE {YEAR(start_date)} = {year} ORDER BY name",
      nums("year", 2019, 2020, 2021, 2022, 2023, 2024), cap=4),
    t("order_limit", "easy", "List the employee id, first name and salary of the {n} "
      "best-paid employees, highest salary first, breaking ties by employee id.",
      "SELECT employee_id, first_name, salary FROM employees ORDER BY salary DESC, employee_id "
      "LIMIT {n}", nums("n", 3, 5, 10), cap=3),
    t("order_limit", "easy", "List the first name, last name and hire date of the {n} employees "
      "hired first, earliest first, breaking ties by employee id.",
      "SELECT first_name, last_name, hire_date FROM employees ORDER BY hire_date, employee_id "
      "LIMIT {n}", nums("n", 3, 5), cap=2),
    # ---------------------------------------------------------------- medium
    t("join2", "medium", "How many employees work in the {dept} department?",
      f"SELECT COUNT(*) FROM {EMP} WHERE d.name = '{{dept}}'", DEPTS, cap=7),
    t("join2", "medium", "What is the average salary in the {dept} department, rounded to 2 "
      "decimals?", f"SELECT {{ROUND2(AVG(e.salary))}} FROM {EMP} WHERE d.name = '{{dept}}'",
      DEPTS, cap=7),
    t("join2", "medium", "How many employees have the job title '{job}'?",
      "SELECT COUNT(*) FROM employees e JOIN jobs j ON j.job_id = e.job_id "
      "WHERE j.title = '{job}'", JOBS, cap=7),
    t("join2", "medium", "List the first and last names of the employees with the job title "
      "'{job}' who were hired in {year} or later, sorted by last name, then first name, then "
      "employee id.",
      "SELECT e.first_name, e.last_name FROM employees e JOIN jobs j ON j.job_id = e.job_id "
      "WHERE j.title = '{job}' AND {YEAR(e.hire_date)} >= {year} "
      "ORDER BY e.last_name, e.first_name, e.employee_id", JOBS, nums("year", 2018, 2021),
      cap=6),
    t("join2", "medium", "How many projects belong to departments located in {city}?",
      "SELECT COUNT(*) FROM projects p JOIN departments d ON d.department_id = p.department_id "
      "WHERE d.city = '{city}'", "SELECT DISTINCT city FROM departments ORDER BY city", cap=3),
    t("join2", "medium", "List the employee id, first name and last name of the employees "
      "managed by someone whose last name is {last}.",
      "SELECT e.employee_id, e.first_name, e.last_name FROM employees e JOIN employees m "
      "ON m.employee_id = e.manager_id WHERE m.last_name = '{last}'", LAST, cap=3),
    t("group_having", "medium", "For each department, how many employees does it have? Return "
      "the department name and the count (employees without a department are left out).",
      f"SELECT d.name, COUNT(*) FROM {EMP} GROUP BY d.department_id, d.name"),
    t("group_having", "medium", "Which departments have an average salary above {s}? Return the "
      "department name and the average salary rounded to 2 decimals.",
      f"SELECT d.name, {{ROUND2(AVG(e.salary))}} FROM {EMP} GROUP BY d.department_id, d.name "
      "HAVING AVG(e.salary) > {s}", nums("s", 65000, 70000, 75000), cap=3),
    t("group_having", "medium", "Which managers have more than {n} direct reports? Return the "
      "manager's employee id and the number of direct reports.",
      "SELECT manager_id, COUNT(*) FROM employees WHERE manager_id IS NOT NULL "
      "GROUP BY manager_id HAVING COUNT(*) > {n}", nums("n", 3, 5, 8), cap=3),
    t("group_having", "medium", "For each assignment role, what is the total number of hours? "
      "Return the role and the total.", "SELECT role, SUM(hours) FROM assignments GROUP BY role"),
    t("group_having", "medium", "Which projects have more than {n} assigned employees? Return "
      "the project id and the number of assignments.",
      "SELECT project_id, COUNT(*) FROM assignments GROUP BY project_id HAVING COUNT(*) > {n}",
      nums("n", 14, 16, 18), cap=3),
    t("date", "medium", "How many salary changes were made in {month_name} {year}?",
      "SELECT COUNT(*) FROM salary_changes WHERE {YEAR(change_date)} = {year} "
      "AND {MONTH(change_date)} = {month}", nums("year", 2018, 2020, 2022, 2023), MONTHS, cap=8),
    t("date", "medium", "For each hire year from {y1} on, how many employees were hired? Return "
      "the year and the count, ordered by year.",
      "SELECT {YEAR(hire_date)} AS y, COUNT(*) FROM employees WHERE {YEAR(hire_date)} >= {y1} "
      "GROUP BY {YEAR(hire_date)} ORDER BY y", nums("y1", 2015, 2018, 2020), cap=2),
    t("date", "medium", "How many finished projects (with an end date) lasted more than {d} "
      "days from start date to end date?",
      "SELECT COUNT(*) FROM projects WHERE end_date IS NOT NULL "
      "AND {DAYS(start_date, end_date)} > {d}", nums("d", 100, 200, 300, 400), cap=3),
    t("null", "medium", "For each department (use 'Unassigned' for employees without one), how "
      "many employees are there? Return the department name and the count.",
      "SELECT COALESCE(d.name, 'Unassigned'), COUNT(*) FROM employees e LEFT JOIN departments d "
      "ON d.department_id = e.department_id GROUP BY COALESCE(d.name, 'Unassigned')"),
    t("null", "medium", "What is the total yearly pay of the employees with the job title "
      "'{job}', counting salary plus salary times commission_pct (a missing commission counts "
      "as 0), rounded to 2 decimals?",
      "SELECT {ROUND2(SUM(e.salary + e.salary * COALESCE(e.commission_pct, 0)))} "
      "FROM employees e JOIN jobs j ON j.job_id = e.job_id WHERE j.title = '{job}'",
      JOBS, cap=3),
    # ---------------------------------------------------------------- hard
    t("join3", "hard", "How many hours in total have employees of the {dept} department "
      "worked on assignments?",
      "SELECT SUM(a.hours) FROM assignments a JOIN employees e "
      "ON e.employee_id = a.employee_id JOIN departments d "
      "ON d.department_id = e.department_id WHERE d.name = '{dept}'", DEPTS, cap=4),
    t("join3", "hard", "List the first and last names of the employees who have the role "
      "'{role}' on a project of the {dept} department, sorted by last name, then first name, "
      "then employee id, without listing an employee twice.",
      "SELECT DISTINCT e.first_name, e.last_name, e.employee_id FROM employees e "
      "JOIN assignments a ON a.employee_id = e.employee_id JOIN projects p "
      "ON p.project_id = a.project_id JOIN departments d ON d.department_id = p.department_id "
      "WHERE a.role = '{role}' AND d.name = '{dept}' "
      "ORDER BY e.last_name, e.first_name, e.employee_id", ROLES, DEPTS, cap=6),
    t("join3", "hard", "For each job title, how many hours have its employees worked on "
      "projects of the {dept} department? Return the job title and the hours.",
      "SELECT j.title, SUM(a.hours) FROM assignments a JOIN employees e "
      "ON e.employee_id = a.employee_id JOIN jobs j ON j.job_id = e.job_id JOIN projects p "
      "ON p.project_id = a.project_id JOIN departments d ON d.department_id = p.department_id "
      "WHERE d.name = '{dept}' GROUP BY j.job_id, j.title", DEPTS, cap=3),
    t("subquery", "hard", "How many employees earn more than the average salary of all "
      "employees?",
      "SELECT COUNT(*) FROM employees WHERE salary > (SELECT AVG(salary) FROM employees)"),
    t("subquery", "hard", "List the employee id and salary of the employees in the {dept} "
      "department who earn more than their department's average salary, sorted by salary "
      "from highest to lowest, then by employee id.",
      f"SELECT e.employee_id, e.salary FROM {EMP} WHERE d.name = '{{dept}}' AND e.salary > "
      "(SELECT AVG(e2.salary) FROM employees e2 WHERE e2.department_id = e.department_id) "
      "ORDER BY e.salary DESC, e.employee_id", DEPTS, cap=4),
    t("subquery", "hard", "How many employees with the job title '{job}' are not assigned to "
      "any project?",
      "SELECT COUNT(*) FROM employees e JOIN jobs j ON j.job_id = e.job_id "
      "WHERE j.title = '{job}' AND NOT EXISTS (SELECT 1 FROM assignments a "
      "WHERE a.employee_id = e.employee_id)", JOBS, cap=4),
    t("subquery", "hard", "List the ids of the employees who earn more than their manager, in "
      "increasing order.",
      "SELECT e.employee_id FROM employees e JOIN employees m ON m.employee_id = e.manager_id "
      "WHERE e.salary > m.salary ORDER BY e.employee_id"),
    t("subquery", "hard", "How many employees have had more than {n} salary changes?",
      "SELECT COUNT(*) FROM employees WHERE employee_id IN (SELECT employee_id "
      "FROM salary_changes GROUP BY employee_id HAVING COUNT(*) > {n})", nums("n", 1, 2, 3, 4),
      cap=3),
    t("subquery", "hard", "List the names of the projects of the {dept} department that have no "
      "assigned employee with the role 'lead', in alphabetical order.",
      "SELECT p.name FROM projects p JOIN departments d ON d.department_id = p.department_id "
      "WHERE d.name = '{dept}' AND p.project_id NOT IN (SELECT project_id FROM assignments "
      "WHERE role = 'lead') ORDER BY p.name", DEPTS, cap=3),
    t("order_limit", "hard", "Which department has the highest total salary cost? Return the "
      "department name and the total salary rounded to 2 decimals (ties: smallest department "
      "id).",
      f"SELECT d.name, {{ROUND2(SUM(e.salary))}} AS total FROM {EMP} "
      "GROUP BY d.department_id, d.name ORDER BY SUM(e.salary) DESC, d.department_id LIMIT 1"),
    t("order_limit", "hard", "List the {n} employees who worked the most hours across all their "
      "assignments: return the employee id, last name and total hours, most hours first, "
      "breaking ties by employee id.",
      "SELECT e.employee_id, e.last_name, SUM(a.hours) AS h FROM employees e "
      "JOIN assignments a ON a.employee_id = e.employee_id "
      "GROUP BY e.employee_id, e.last_name ORDER BY h DESC, e.employee_id LIMIT {n}",
      nums("n", 3, 5), cap=2),
    t("group_having", "hard", "For each department with more than {n} employees, what is the "
      "average salary of its employees hired in or after {year}? Return the department name "
      "and the average rounded to 2 decimals.",
      f"SELECT d.name, {{ROUND2(AVG(e.salary))}} FROM {EMP} "
      "WHERE {YEAR(e.hire_date)} >= {year} "
      "AND d.department_id IN (SELECT department_id FROM employees WHERE department_id IS NOT "
      "NULL GROUP BY department_id HAVING COUNT(*) > {n}) GROUP BY d.department_id, d.name",
      nums("n", 15, 18), nums("year", 2015, 2020), cap=3),
    t("date", "hard", "What is the average raise (new_salary minus old_salary) of the salary "
      "changes made in {year} whose reason is '{reason}', rounded to 2 decimals?",
      "SELECT {ROUND2(AVG(new_salary - old_salary))} FROM salary_changes "
      "WHERE {YEAR(change_date)} = {year} AND reason = '{reason}'",
      nums("year", 2016, 2019, 2021, 2023),
      "SELECT DISTINCT reason FROM salary_changes WHERE reason IS NOT NULL ORDER BY 1", cap=3),
    t("date", "hard", "How many employees received a salary change within their first {d} "
      "days after being hired? Count each employee once.",
      "SELECT COUNT(DISTINCT e.employee_id) FROM employees e JOIN salary_changes s "
      "ON s.employee_id = e.employee_id WHERE s.change_date >= e.hire_date "
      "AND {DAYS(e.hire_date, s.change_date)} <= {d}", nums("d", 365, 730, 1000), cap=3),
    t("null", "hard", "For each department (leaving out employees without one), how many of its "
      "employees have no manager or no email address? Return the department name and the count, "
      "leaving out departments where the count is 0.",
      f"SELECT d.name, COUNT(*) FROM {EMP} WHERE e.manager_id IS NULL OR e.email IS NULL "
      "GROUP BY d.department_id, d.name"),
)  # fmt: skip
