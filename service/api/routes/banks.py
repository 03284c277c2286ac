"""/v1/banks: read, consolidate (evolver), audit, controls and pins."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from service.api.deps import BanksDep, CanConsolidate, CanControlBank, CanReadBank
from service.api.schemas import NAME_PATTERN, AuditPage, BankControls

router = APIRouter(prefix="/v1/banks", tags=["banks"])
BankName = Annotated[str, Path(pattern=NAME_PATTERN)]


@router.get("/{name}", summary="The Experience bank: entries, controls, pending evidence")
async def show(name: BankName, banks: BanksDep, who: CanReadBank):
    return await banks.show(name, who.tenant)


@router.post("/{name}/consolidate", summary="Run the evolver over pending evidence")
async def consolidate(name: BankName, banks: BanksDep, who: CanConsolidate,
                      evolver: Annotated[Literal["rules", "model"], Query()] = "rules"):
    return await banks.consolidate(name, who.tenant, who.key_id, evolver=evolver)


@router.get("/{name}/audit", response_model=AuditPage, summary="Consolidation and control events")
async def audit(name: BankName, banks: BanksDep, who: CanReadBank,
                after: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=1000)] = 100):
    return await banks.audit(name, after, limit, who.tenant)


@router.patch("/{name}/controls", summary="Operator controls: pin entries, disable verbs, harness cap")
async def controls(name: BankName, body: BankControls, banks: BanksDep, who: CanControlBank):
    return await banks.set_controls(name, body, who.tenant, who.key_id)
