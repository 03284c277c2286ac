"""API keys and roles: 401 without/with an unknown key, 403 for a role that may not, every endpoint x every role;
another tenant's key gets the same 404 as a session or bank that does not exist, and changes nothing; banks are
per tenant; every audit event names the key that caused it. Real Redis, real vLLM engine."""

from __future__ import annotations

import pytest

from service.auth import ROLES
from tests.service.api.keys import auth_settings, bearer, key_id

ADM = ["go to desk 1", "look"]
STEP = {"observation": "You see a desk 1.", "admissible_actions": ADM}

# (name, method, path, json body, permission); {sid} is a session of tenant acme, bank "default" is acme's
ENDPOINTS = [
    ("create", "POST", "/v1/sessions", {"task": "t", "harness_cap": 0}, "session.create"),
    ("step", "POST", "/v1/sessions/{sid}/step", STEP, "session.step"),
    ("state", "GET", "/v1/sessions/{sid}/state", None, "session.state"),
    ("state_at", "GET", "/v1/sessions/{sid}/state?version=0", None, "session.state"),
    ("audit", "GET", "/v1/sessions/{sid}/audit", None, "session.audit"),
    ("diff", "GET", "/v1/sessions/{sid}/diff?from=0&to=0", None, "session.audit"),
    ("timeline", "GET", "/ui/sessions/{sid}", None, "session.audit"),
    ("controls", "PATCH", "/v1/sessions/{sid}/controls", {"harness_cap": 1}, "session.control"),
    ("end", "POST", "/v1/sessions/{sid}/end", {"won": True}, "session.end"),
    ("delete", "DELETE", "/v1/sessions/{sid}", None, "session.delete"),
    ("bank", "GET", "/v1/banks/default", None, "bank.read"),
    ("bank_audit", "GET", "/v1/banks/default/audit", None, "bank.read"),
    ("bank_consolidate", "POST", "/v1/banks/default/consolidate", None, "bank.consolidate"),
    ("bank_controls", "PATCH", "/v1/banks/default/controls", {"harness_cap": 2}, "bank.control"),
    ("metrics", "GET", "/metrics", None, "metrics"),
]
TENANT_SCOPED = [e for e in ENDPOINTS if "{sid}" in e[2] or "/banks/" in e[2]]


def _problem(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/problem+json"
    p = r.json()
    assert p["status"] == status and p["title"] and p["detail"]
    return p


async def _session(c, tenant="acme") -> str:
    r = await c.post("/v1/sessions", json={"task": "open the drawer", "harness_cap": 0},
                     headers=bearer(tenant, "agent"))
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


async def _call(c, endpoint, sid, headers):
    _, method, path, body, _ = endpoint
    kw = {"headers": headers}
    if body is not None:
        kw["json"] = body
    return await c.request(method, path.replace("{sid}", sid), **kw)


async def test_no_key_or_unknown_key_is_401_everywhere(app_factory):
    async with app_factory(**auth_settings()) as c:
        sid = await _session(c)
        for ep in ENDPOINTS:
            for headers in ({}, {"Authorization": "Bearer nope"}, {"X-API-Key": "nope"},
                            {"Authorization": "Basic YWxhZGRpbjpvcGVuc2VzYW1l"}):
                p = _problem(await _call(c, ep, sid, headers), 401)
                assert "key" in p["detail"], (ep[0], p)
        r = await c.get(f"/v1/sessions/{sid}/state")
        assert r.headers["www-authenticate"] == "Bearer"
        # probes and the schema stay open
        assert (await c.get("/healthz")).status_code == 200
        assert (await c.get("/readyz")).status_code == 200
        assert (await c.get("/openapi.json")).status_code == 200


async def test_x_api_key_header_works_too(app_factory):
    async with app_factory(**auth_settings()) as c:
        from tests.service.api.keys import KEYS

        r = await c.post("/v1/sessions", json={"task": "t"}, headers={"X-API-Key": KEYS["acme", "agent"]})
        assert r.status_code == 201


@pytest.mark.parametrize("role", list(ROLES))
async def test_every_endpoint_by_role(app_factory, role):
    """Each role gets through exactly the endpoints its permissions name; every other one is 403 and writes nothing."""
    async with app_factory(**auth_settings()) as c:
        admin = bearer("acme", "admin")
        for ep in ENDPOINTS:
            name, perm = ep[0], ep[4]
            sid = await _session(c)
            before = (await c.get(f"/v1/sessions/{sid}/state", headers=admin)).json()
            bank_before = (await c.get("/v1/banks/default", headers=admin)).json()
            r = await _call(c, ep, sid, bearer("acme", role))
            if perm in ROLES[role]:
                assert r.status_code in (200, 201, 204), (role, name, r.text)
            else:
                p = _problem(r, 403)
                assert role in p["detail"], p
                assert (await c.get(f"/v1/sessions/{sid}/state", headers=admin)).json() == before
                assert (await c.get("/v1/banks/default", headers=admin)).json() == bank_before


@pytest.mark.parametrize("role", list(ROLES))
async def test_another_tenant_gets_404_like_a_missing_one(app_factory, role):
    """zeta's keys never see acme's sessions or banks: the same 404 as for ids that do not exist, and no write."""
    async with app_factory(**auth_settings()) as c:
        admin_a = bearer("acme", "admin")
        sid = await _session(c)
        ok = await c.post(f"/v1/sessions/{sid}/step", json=STEP, headers=bearer("acme", "agent"))
        assert ok.status_code == 200
        before = (await c.get(f"/v1/sessions/{sid}/state", headers=admin_a)).json()
        audit_before = (await c.get(f"/v1/sessions/{sid}/audit", headers=admin_a)).json()
        bank_before = (await c.get("/v1/banks/default", headers=admin_a)).json()
        for ep in TENANT_SCOPED:
            if ep[0] == "metrics":
                continue
            theirs = await _call(c, ep, sid, bearer("zeta", role))
            if ep[4] not in ROLES[role]:
                _problem(theirs, 403)        # refused by role before any lookup: says nothing about existence
                continue
            if "/banks/" in ep[2]:
                missing = await _call(c, (*ep[:2], ep[2].replace("default", "nosuchbank"), *ep[3:]), sid,
                                      bearer("zeta", role))
                p, q = _problem(theirs, 404), _problem(missing, 404)
                assert p["title"] == q["title"]
                assert p["detail"] == q["detail"].replace("nosuchbank", "default")
            else:
                missing = await _call(c, ep, "0" * 32, bearer("zeta", role))
                p, q = _problem(theirs, 404), _problem(missing, 404)
                assert p["title"] == q["title"] and p["detail"] == q["detail"].replace("0" * 32, sid), (p, q)
        assert (await c.get(f"/v1/sessions/{sid}/state", headers=admin_a)).json() == before
        assert (await c.get(f"/v1/sessions/{sid}/audit", headers=admin_a)).json() == audit_before
        assert (await c.get("/v1/banks/default", headers=admin_a)).json() == bank_before


async def test_banks_are_per_tenant(app_factory):
    """Two tenants' "default" banks are two documents: evidence, consolidation and controls never cross."""
    async with app_factory(**auth_settings()) as c:
        a, z = await _session(c, "acme"), await _session(c, "zeta")
        for sid, t in ((a, "acme"), (z, "zeta")):
            r = await c.post(f"/v1/sessions/{sid}/end", json={"won": t == "acme"}, headers=bearer(t, "agent"))
            assert r.status_code == 200
        ba = (await c.get("/v1/banks/default", headers=bearer("acme", "auditor"))).json()
        bz = (await c.get("/v1/banks/default", headers=bearer("zeta", "auditor"))).json()
        assert ba["pending_evidence"] == 1 and bz["pending_evidence"] == 1
        r = await c.post("/v1/banks/default/consolidate", headers=bearer("acme", "ops"))
        assert r.status_code == 200 and r.json()["evidence"] == 1
        r = await c.patch("/v1/banks/default/controls", json={"disabled_verbs": ["note"]},
                          headers=bearer("acme", "ops"))
        assert r.status_code == 200
        bz2 = (await c.get("/v1/banks/default", headers=bearer("zeta", "auditor"))).json()
        assert bz2 == bz                                          # zeta's bank untouched
        za = (await c.get("/v1/banks/default/audit", headers=bearer("zeta", "auditor"))).json()
        assert za["events"] == []
        # a bank only one tenant made is invisible to the other
        await c.post("/v1/sessions", json={"task": "t", "bank": "private"}, headers=bearer("acme", "agent"))
        assert (await c.get("/v1/banks/private", headers=bearer("acme", "auditor"))).status_code == 200
        _problem(await c.get("/v1/banks/private", headers=bearer("zeta", "auditor")), 404)


async def test_every_audit_event_names_its_key(app_factory):
    async with app_factory(**auth_settings(harness_cap=1)) as c:
        sid = await _session(c)
        for i in range(2):
            r = await c.post(f"/v1/sessions/{sid}/step", json={**STEP, "observation": f"room {i}"},
                             headers=bearer("acme", "agent"))
            assert r.status_code == 200, r.text
        r = await c.patch(f"/v1/sessions/{sid}/controls", json={"harness_cap": 0}, headers=bearer("acme", "ops"))
        assert r.status_code == 200
        r = await c.post(f"/v1/sessions/{sid}/end", json={"won": True}, headers=bearer("acme", "admin"))
        assert r.status_code == 200
        events = (await c.get(f"/v1/sessions/{sid}/audit", params={"limit": 1000},
                              headers=bearer("acme", "auditor"))).json()["events"]
        by_kind = {}
        for e in events:
            by_kind.setdefault(e["kind"], set()).add(e["key_id"])
        assert by_kind.pop("control") == {key_id("acme", "ops")}
        assert by_kind.pop("end") == {key_id("acme", "admin")}
        assert set().union(*by_kind.values()) == {key_id("acme", "agent")}   # observe, harness, env
        r = await c.post("/v1/banks/default/consolidate", headers=bearer("acme", "ops"))
        bank_events = (await c.get("/v1/banks/default/audit", headers=bearer("acme", "auditor"))).json()["events"]
        assert bank_events and all(e["key_id"] == key_id("acme", "ops") for e in bank_events)


async def test_dev_mode_caller_is_admin_of_default_and_audited_as_dev(app_factory):
    async with app_factory(auth="off") as c:
        sid = (await c.post("/v1/sessions", json={"task": "t", "harness_cap": 0})).json()["session_id"]
        assert (await c.post(f"/v1/sessions/{sid}/step", json=STEP)).status_code == 200
        events = (await c.get(f"/v1/sessions/{sid}/audit")).json()["events"]
        assert {e["key_id"] for e in events} == {"dev"}
        assert (await c.get("/metrics")).status_code == 200
