"""Domains: how observations become Belief, and how `track` reads it.

The registry is this explicit table: a new domain is imported here and listed in DOMAINS.
"""

from service.domains.alfworld import AlfworldDomain
from service.domains.base import Domain
from service.domains.generic import GenericDomain

DOMAINS: dict[str, type] = {d.name: d for d in (AlfworldDomain, GenericDomain)}


def get_domain(name: str) -> Domain:
    try:
        return DOMAINS[name]()
    except KeyError:
        raise KeyError(f"unknown domain {name!r}; known: {sorted(DOMAINS)}") from None


__all__ = ["DOMAINS", "Domain", "get_domain"]
