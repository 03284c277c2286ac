"""API keys, roles and permissions.

A key is configured as a record ``{"id", "role", "tenant", "sha256"}``: the SHA-256 hex digest of the secret,
never the secret itself. Records come from a file (EVOHARNESS_API_KEYS_FILE, JSON or YAML: a list of records, or
``{"keys": [...]}``) and/or from EVOHARNESS_API_KEYS (a JSON list; a Kubernetes Secret fits either). A presented
key is hashed and compared with every configured digest in constant time (`hmac.compare_digest`, no early exit).

Make a key and its record with ``evoharness keys new --id ID --role ROLE --tenant T``, or hash an existing one with
``evoharness keys hash`` (reads the key on stdin), or with this one-liner::

    printf %s "$KEY" | sha256sum | cut -d' ' -f1

Roles -> permissions: see ROLES. Every key belongs to one tenant; sessions and banks of other tenants do not exist
for it (404). With EVOHARNESS_AUTH=off (dev mode) every caller is the admin of tenant "default", key id "dev".
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("evoharness")

TENANT_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")

# permission -> what it allows
PERMISSIONS = {
    "session.create": "start a session",
    "session.step": "step a session",
    "session.end": "end a session",
    "session.delete": "delete a session",
    "session.state": "read a session's state (current or at a version)",
    "session.audit": "read a session's audit log and diffs (and its timeline page)",
    "session.control": "change a session's controls (pins, disabled verbs, harness cap)",
    "bank.read": "read a bank and its audit log",
    "bank.consolidate": "run the evolver on a bank",
    "bank.control": "change a bank's controls and pins",
    "metrics": "read /metrics",
}
_AGENT = {"session.create", "session.step", "session.end", "session.delete", "session.state"}
_AUDITOR = {"session.state", "session.audit", "bank.read"}
_OPS = {"session.control", "bank.consolidate", "bank.control", "metrics"}
ROLES: dict[str, frozenset[str]] = {
    "agent": frozenset(_AGENT),
    "auditor": frozenset(_AUDITOR),
    "ops": frozenset(_OPS),
    "admin": frozenset(PERMISSIONS),
}


class AuthConfigError(ValueError):
    """The key configuration is invalid (the service refuses to start)."""


@dataclass(frozen=True)
class ApiKey:
    id: str
    role: str
    tenant: str
    sha256: str

    def may(self, permission: str) -> bool:
        return permission in ROLES[self.role]


DEV_KEY = ApiKey(id="dev", role="admin", tenant="default", sha256="")


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _record(raw: dict, where: str) -> ApiKey:
    if not isinstance(raw, dict):
        raise AuthConfigError(f"{where}: a key record must be an object with id, role, tenant, sha256")
    missing = [f for f in ("id", "role", "tenant", "sha256") if not raw.get(f)]
    if missing:
        extra = " (store the SHA-256 of the key, not the key: `evoharness keys hash`)" if "key" in raw else ""
        raise AuthConfigError(f"{where}: key record {raw.get('id', '?')!r} lacks {', '.join(missing)}{extra}")
    k = ApiKey(str(raw["id"]), str(raw["role"]), str(raw["tenant"]), str(raw["sha256"]).lower().removeprefix("sha256:"))
    if k.role not in ROLES:
        raise AuthConfigError(f"{where}: key {k.id!r} has unknown role {k.role!r}; roles: {', '.join(ROLES)}")
    if not TENANT_PATTERN.match(k.tenant):
        raise AuthConfigError(f"{where}: key {k.id!r} tenant must match {TENANT_PATTERN.pattern}")
    if not _HEX64.match(k.sha256):
        raise AuthConfigError(f"{where}: key {k.id!r} sha256 must be 64 hex digits")
    return k


def parse_records(text: str, where: str) -> list[ApiKey]:
    """JSON, or YAML when it is not JSON: a list of records or {"keys": [...]}."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            import yaml
        except ImportError:  # pragma: no cover - PyYAML ships with uvicorn[standard] / vLLM
            raise AuthConfigError(f"{where}: not JSON, and PyYAML is not installed for YAML") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise AuthConfigError(f"{where}: neither JSON nor YAML ({e})") from None
    if isinstance(data, dict):
        data = data.get("keys")
    if not isinstance(data, list):
        raise AuthConfigError(f"{where}: expected a list of key records (or {{keys: [...]}})")
    return [_record(r, where) for r in data]


class KeyRing:
    def __init__(self, keys: list[ApiKey]):
        ids, digests = set(), set()
        for k in keys:
            if k.id in ids:
                raise AuthConfigError(f"duplicate key id {k.id!r}")
            if k.sha256 in digests:
                raise AuthConfigError(f"key {k.id!r}: the same secret is configured twice")
            ids.add(k.id)
            digests.add(k.sha256)
        self.keys = list(keys)

    def __len__(self) -> int:
        return len(self.keys)

    def lookup(self, secret: str) -> ApiKey | None:
        """The key whose digest matches; every digest is compared (constant time per comparison, no early exit)."""
        digest = hash_key(secret).encode()
        found = None
        for k in self.keys:
            if hmac.compare_digest(digest, k.sha256.encode()):
                found = k
        return found


def load_keyring(settings) -> KeyRing | None:
    """None when auth is off (and a loud warning); else the configured keys (refuses to start without any)."""
    if settings.auth == "off":
        banner = ("AUTH IS OFF (EVOHARNESS_AUTH=off, dev mode): every caller is admin of tenant 'default'. "
                  "Never expose this service beyond localhost.")
        log.warning(banner)
        print(f"[evoharness] WARNING: {banner}", file=sys.stderr, flush=True)
        return None
    keys: list[ApiKey] = []
    if settings.api_keys_file:
        path = Path(settings.api_keys_file)
        if not path.is_file():
            raise AuthConfigError(f"EVOHARNESS_API_KEYS_FILE={path} does not exist")
        keys += parse_records(path.read_text(), str(path))
    if settings.api_keys:
        raw = settings.api_keys
        keys += parse_records(raw if isinstance(raw, str) else json.dumps(raw), "EVOHARNESS_API_KEYS")
    if not keys:
        raise AuthConfigError("auth is on but no API keys are configured: set EVOHARNESS_API_KEYS_FILE or "
                              "EVOHARNESS_API_KEYS (records from `evoharness keys new`), or run in dev mode with "
                              "EVOHARNESS_AUTH=off / `evoharness serve --dev`")
    ring = KeyRing(keys)
    log.info("auth on: %d API keys (%s)", len(ring), ", ".join(sorted({f"{k.tenant}/{k.role}" for k in keys})))
    return ring


def new_key() -> str:
    return "evo_" + secrets.token_urlsafe(32)
