"""API keys for the access tests: two tenants x four roles (importable as tests.service.api.keys)."""

from __future__ import annotations

import json

from service.auth import ROLES, hash_key

TENANTS = ("acme", "zeta")
KEYS = {(t, r): f"secret-{t}-{r}" for t in TENANTS for r in ROLES}          # (tenant, role) -> secret


def key_id(tenant: str, role: str) -> str:
    return f"{tenant}-{role}"


def records() -> list[dict]:
    return [{"id": key_id(t, r), "role": r, "tenant": t, "sha256": hash_key(s)} for (t, r), s in KEYS.items()]


def auth_settings(**kw) -> dict:
    """Settings overrides for an app with auth on and the keys above."""
    return {"auth": "on", "api_keys": json.dumps(records()), **kw}


def bearer(tenant: str, role: str) -> dict:
    return {"Authorization": f"Bearer {KEYS[tenant, role]}"}
