"""Who is calling: keys, tenants and the admin surface (config `auth:`).

Modes (`auth.mode`):

- `none` (default): every caller is the tenant "default"; the shipped demo needs no key.
- `proxy_keys`: clients send one of `auth.keys` as `Authorization: Bearer …`; the upstream
  key comes from the route (or its `api_key_env`). Tenant = a hash of the proxy key.
- `passthrough`: the client's bearer key is sent upstream in place of the route's key; the
  proxy cannot check it (the provider does). Tenant = a hash of that key. Until the
  provider has accepted a key once (remembered per process, `PROVEN_MAX` keys), a turn's
  store writes wait for the provider's answer: a bogus key writes nothing.

`/admin/*` and `/ui*` need one of `auth.admin_keys` (Bearer, or as the password of HTTP
Basic so a browser can open `/ui`). With no admin key configured they stay open in mode
`none` and are closed in the keyed modes. `/healthz` and `/metrics` carry no tenant data
and stay open. Why a hash for the tenant: the store, the log and the admin API need a
stable owner for each conversation, and the key itself must appear in none of them; a
tenant id cannot be turned back into a key. Keys are compared by their SHA-256 digest, so
a lookup takes the same time whatever prefix of a key a caller guesses.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web

from proxy.config import AuthSettings, ConfigError
from proxy.errors import AuthenticationFailed, PermissionDenied

DEFAULT_TENANT = "default"
PROVEN_MAX = 100_000
PUBLIC = frozenset({"/healthz", "/metrics"})
_BEARER = {"WWW-Authenticate": 'Bearer realm="ctxwarden"'}
_BASIC = {"WWW-Authenticate": 'Basic realm="ctxwarden admin", charset="UTF-8"'}
_MISSING = ("You didn't provide an API key. You need to provide your API key in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str
    upstream_key: str | None = field(default=None, repr=False)  # passthrough: goes upstream
    admin: bool = False


CALLER: web.RequestKey[Caller] = web.RequestKey("ctxwarden_caller", Caller)
_ANONYMOUS = Caller(DEFAULT_TENANT)


def tenant_for_key(key: str) -> str:
    """The tenant id of a key: stable across restarts and replicas, never the key."""
    return "t-" + hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=12,
                                  person=b"ctxw-tenant").hexdigest()


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _keys(listed: list[str], env: str | None, what: str, environ: Mapping[str, str],
          problems: list[str]) -> frozenset[bytes]:
    """The keys' digests; an unset `env` is added to `problems` (reported all at once)."""
    found = [k for k in listed if k]
    if env is not None:
        raw = environ.get(env, "")
        if not raw.strip():
            state = "is not set" if env not in environ else "is empty (it holds no key)"
            problems.append(f"auth.{what}_env: the environment variable {env} {state}")
        found += [k.strip() for k in raw.split(",") if k.strip()]
    return frozenset(_digest(k) for k in found)


def bearer(request: web.Request) -> str | None:
    """The key in `Authorization: Bearer …`, or the password of `Basic` (browsers)."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return value or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None


class Guard:
    """Checks one request against the `auth:` config; built once per app."""

    def __init__(self, settings: AuthSettings, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.mode = settings.mode
        problems: list[str] = []  # all of them in one ConfigError
        self._clients = _keys([k.get_secret_value() for k in settings.keys], settings.keys_env,
                              "keys", env, problems)
        keys_env_unset = bool(problems)
        self._admins = _keys([k.get_secret_value() for k in settings.admin_keys],
                             settings.admin_keys_env, "admin_keys", env, problems)
        self._proven: OrderedDict[str, None] = OrderedDict()  # passthrough tenants
        if self.mode == "proxy_keys" and not self._clients and not keys_env_unset:
            problems.append("auth.keys: mode proxy_keys needs at least one key "
                            "(auth.keys or auth.keys_env)")
        if problems:
            raise ConfigError("\n".join(problems))

    def proven(self, tenant: str) -> bool:
        """Passthrough: has the provider accepted this tenant's key since start-up?"""
        return tenant in self._proven

    def prove(self, tenant: str) -> None:
        self._proven[tenant] = None
        self._proven.move_to_end(tenant)
        while len(self._proven) > PROVEN_MAX:
            self._proven.popitem(last=False)

    def caller(self, request: web.Request) -> Caller:
        path = request.path
        if path in PUBLIC:
            return _ANONYMOUS
        ui = path == "/ui" or path.startswith("/ui/")
        if ui or path == "/admin" or path.startswith("/admin/"):
            return self._admin(request, ui)
        if self.mode == "none":
            return _ANONYMOUS
        key = bearer(request)
        if key is None:
            raise AuthenticationFailed(_MISSING, code="missing_api_key", headers=_BEARER)
        if self.mode == "passthrough":
            return Caller(tenant_for_key(key), upstream_key=key)
        if _digest(key) not in self._clients:
            raise AuthenticationFailed("Incorrect API key provided.", headers=_BEARER)
        return Caller(tenant_for_key(key))

    def _admin(self, request: web.Request, ui: bool) -> Caller:
        if not self._admins:
            if self.mode == "none":
                return Caller(DEFAULT_TENANT, admin=True)
            raise PermissionDenied("The admin API and inspector are disabled: no admin key is "
                                   "configured (auth.admin_keys).", code="admin_disabled")
        challenge = _BASIC if ui else _BEARER
        key = bearer(request)
        if key is None:
            raise AuthenticationFailed("An admin key is required for /admin and /ui "
                                       "(Authorization: Bearer ADMIN_KEY).",
                                       code="missing_api_key", headers=challenge)
        digest = _digest(key)
        if digest in self._admins:
            return Caller(DEFAULT_TENANT, admin=True)
        if digest in self._clients:
            raise PermissionDenied("This key may call the API but not /admin or /ui; those "
                                   "need an admin key.", code="admin_key_required")
        raise AuthenticationFailed("Incorrect admin key provided.", headers=challenge)


AUTH: web.AppKey[Guard] = web.AppKey("ctxwarden_auth", Guard)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def require_key(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Runs inside the error boundary: a refusal leaves as OpenAI's 401/403 shape."""
    guard = request.app.get(AUTH)
    if guard is not None:
        request[CALLER] = guard.caller(request)
    return await handler(request)


def setup_auth(app: web.Application, settings: AuthSettings) -> None:
    """Raises ConfigError (start-up stops) when the keys the config names are missing."""
    app[AUTH] = Guard(settings)  # `require_key` (in init_app's middleware list) reads it


def caller_of(request: web.Request) -> Caller:
    return request[CALLER] if CALLER in request else _ANONYMOUS


def tenant_of(request: web.Request) -> str:
    return caller_of(request).tenant


def upstream_key_of(request: web.Request) -> str | None:
    """The key to send upstream instead of the route's (passthrough), else None."""
    return caller_of(request).upstream_key
