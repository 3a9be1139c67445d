"""The JSON body of an admin request, with a clear error when it is not an object."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from gateway.errors import InvalidRequest


async def json_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body
