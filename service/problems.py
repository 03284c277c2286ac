"""The use-cases' errors: an `ApiError` carries an RFC 9457 problem (status, title, detail, extra members).

No web framework here: `service.sessions` and `service.banks` raise these, and `service.api.errors` maps them to
problem+json responses.
"""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, title: str, detail: str, headers: dict[str, str] | None = None, **extra):
        super().__init__(detail)
        self.status, self.title, self.detail, self.extra = status, title, detail, extra
        self.headers = headers


def rate_limited(key_id: str, verdict, window_s: float) -> ApiError:
    """The 429 for a request over its key's rate limit (verdict: service.rate_limit.Verdict)."""
    return ApiError(429, "Too many requests",
                    f"key {key_id!r} made over {verdict.limit} requests in {window_s:g} s; "
                    f"retry in {verdict.retry_after_s} s",
                    headers={"Retry-After": str(verdict.retry_after_s)}, retry_after=verdict.retry_after_s)


def version_conflict(current: int, why: str) -> ApiError:
    """The 409 for a commit the store refused (service.store.docs.VersionConflict): the version moved, or ("lease")
    the request outlived its lease, so its write was fenced off. Either way nothing was written."""
    if why == "lease":
        return ApiError(409, "Lease lost",
                        "the request outlived its lease on this document (its replica stalled, or could not reach "
                        f"Redis, for longer than the lease); nothing was written; current version is {current}",
                        version=current)
    return ApiError(409, "Version conflict", f"version conflict ({why}); current version is {current}", version=current)
