"""Annotated dependency aliases used by the routes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from service.banks import BankService
from service.sessions import SessionService
from service.settings import Settings


@dataclass(frozen=True)
class Principal:
    """Who is calling. Until API keys exist (security issue) everyone is the `default` tenant."""

    tenant: str = "default"
    key_id: str | None = None


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _sessions(request: Request) -> SessionService:
    return request.app.state.sessions


def _banks(request: Request) -> BankService:
    return request.app.state.banks


def _principal(request: Request) -> Principal:
    return Principal()


SettingsDep = Annotated[Settings, Depends(_settings)]
SessionsDep = Annotated[SessionService, Depends(_sessions)]
BanksDep = Annotated[BankService, Depends(_banks)]
PrincipalDep = Annotated[Principal, Depends(_principal)]
