"""Domains: how observations become Belief, and how `track` reads it."""

from service.domains.base import Domain, get_domain, DOMAINS

__all__ = ["Domain", "get_domain", "DOMAINS"]
