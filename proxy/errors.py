"""Every error the proxy answers with, and the one place foreign errors are mapped.

Hierarchy (each answers OpenAI's shape ``{"error": {"message", "type", "code"}}``):

    ProxyError                      500 api_error / internal_error
    ├── InvalidRequest              400 invalid_request_error / <code>
    │   ├── ContextLengthExceeded   400 invalid_request_error / context_length_exceeded
    │   ├── RouteNotFound           404 invalid_request_error / model_not_found | unknown_url
    │   └── MethodNotAllowed        405 invalid_request_error / method_not_allowed
    ├── PayloadTooLarge             413 invalid_request_error / request_too_large
    ├── AuthenticationFailed        401 authentication_error / invalid_api_key
    ├── PermissionDenied            403 permission_error / forbidden
    ├── RateLimited                 429 rate_limit_error / rate_limit_exceeded (+ Retry-After)
    ├── UpstreamError               502 upstream_error / bad_gateway
    │   └── UpstreamUnavailable     503 service_unavailable_error / upstream_unavailable |
    │                                   upstream_overloaded (+ Retry-After)
    ├── UpstreamTimeout             504 timeout_error / upstream_timeout
    └── StoreUnavailable            503 store_error / store_unavailable

LiteLLM's exceptions are mapped in `proxy.upstream.map_upstream_error`; nothing else
should catch them. The store's `store.errors.StoreUnavailable` is mapped here: the 503 class
below subclasses it and is registered as the one the store raises, so the error boundary
that answers every ProxyError answers it too, and the store never imports the proxy.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson
from aiohttp import web

from store import errors as store_errors


class ProxyError(Exception):
    status: ClassVar[int] = 500
    type: ClassVar[str] = "api_error"
    default_code: ClassVar[str] = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"message": self.message, "type": self.type, "code": self.code}
        if self.param is not None:
            err["param"] = self.param
        return {"error": err}

    def response(self, extra_headers: dict[str, str] | None = None) -> web.Response:
        headers = {**self.headers, **(extra_headers or {})}
        return web.Response(
            body=orjson.dumps(self.body()),
            status=self.status,
            content_type="application/json",
            headers=headers,
        )


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"
    default_code = "invalid_request"


class ContextLengthExceeded(InvalidRequest):
    default_code = "context_length_exceeded"


class RouteNotFound(InvalidRequest):
    status = 404
    default_code = "model_not_found"


class MethodNotAllowed(InvalidRequest):
    status = 405
    default_code = "method_not_allowed"


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    default_code = "request_too_large"


class AuthenticationFailed(ProxyError):
    status = 401
    type = "authentication_error"
    default_code = "invalid_api_key"


class PermissionDenied(ProxyError):
    status = 403
    type = "permission_error"
    default_code = "forbidden"


class RateLimited(ProxyError):
    status = 429
    type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class UpstreamError(ProxyError):
    status = 502
    type = "upstream_error"
    default_code = "bad_gateway"


class UpstreamUnavailable(UpstreamError):
    """503: the upstream is overloaded or down for now; retry later (`Retry-After` if given)."""

    status = 503
    type = "service_unavailable_error"
    default_code = "upstream_unavailable"


class UpstreamTimeout(ProxyError):
    status = 504
    type = "timeout_error"
    default_code = "upstream_timeout"


class StoreUnavailable(ProxyError, store_errors.StoreUnavailable):
    status = 503
    type = "store_error"
    default_code = "store_unavailable"


store_errors.raise_as(StoreUnavailable)
