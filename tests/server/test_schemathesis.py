"""Property-based fuzzing of the OpenAPI schema: no 5xx and no reply outside the schema."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gymhub.server.app import create_app

from .conftest import local_registry

app = create_app(["echo-v0"], registry=local_registry(), max_episodes=64, ttl_s=60,
                 step_timeout_s=5)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)

CHECKS = (not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance)


@schema.parametrize()
@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms(case: Any) -> None:
    case.call_and_validate(checks=CHECKS)
