from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """Admin URL of a test PostgreSQL server; skips when unset or unreachable."""
    url = os.environ.get("GYMHUB_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("GYMHUB_TEST_POSTGRES_URL is not set")
    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed")
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    try:
        with psycopg.connect(plain, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    return url
