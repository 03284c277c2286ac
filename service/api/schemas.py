"""Request and response bodies. Field names are part of the public contract."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

Mode = Literal["inline", "always_on", "env_only"]
Verb = Literal["track", "commit", "recall", "note"]
NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"


def _check_text(value, where: str) -> None:
    """ValueError for a string holding a lone UTF-16 surrogate (JSON's "\\ud800" escape without its pair): not
    text, and it cannot be written out as UTF-8 (prompt, audit, responses)."""
    if type(value) is str:
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as e:
                raise ValueError(f"{where}: a lone surrogate {value[e.start]!r} at character {e.start} "
                                 "is not text (escape pairs like \\ud83d\\ude00 are fine)") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_text(k, where)
            _check_text(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_text(v, f"{where}[{i}]")


class _Strict(BaseModel):
    """Request bodies: unknown fields refused; every string, at any depth, must be valid Unicode (422)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _valid_unicode(self, info: ValidationInfo):
        if info.mode == "json":  # parsed by pydantic from JSON text: its parser refuses lone surrogates itself
            return self
        for name in type(self).model_fields:
            _check_text(getattr(self, name), name)
        return self


class SessionCreate(_Strict):
    task: str = Field(..., min_length=1, description="the task text the policy works on")
    domain: str = Field("generic", description="generic | alfworld")
    mode: Mode = "inline"
    bank: str = Field("default", pattern=NAME_PATTERN, description="Experience bank shared by name")
    metadata: dict[str, Any] = Field(default_factory=dict)
    modules: dict[Literal["belief", "progress", "experience"], bool] | None = Field(
        None, description="switch harness modules off for ablations (default: all on)")
    max_steps: int | None = Field(None, ge=1, description="step budget; a harness call spends a step too")
    harness_cap: int | None = Field(None, ge=0, le=64, description="per-step harness-call cap (default: server's)")


class SessionCreated(BaseModel):
    session_id: str
    version: int


class StepIn(_Strict):
    observation: str = Field(..., description="what the environment said after the last action")
    admissible_actions: list[str] | None = Field(
        None, description="if given, the returned action is one of these (or the service plays a harness verb)")
    won: bool | None = None
    done: bool | None = Field(None, description="the episode is over: the service records it and returns no action")


class TurnOut(BaseModel):
    kind: Literal["harness", "env"]
    verb: str | None
    arg: str | None
    reason: str
    result: str | None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    harness_calls: int
    model_seconds: float
    total_seconds: float


class StepOut(BaseModel):
    action: str | None
    turns: list[TurnOut]
    version: int
    usage: Usage


class EndIn(_Strict):
    won: bool


class SessionControls(_Strict):
    disabled_verbs: list[Verb] | None = None
    harness_cap: int | None = Field(None, ge=0, le=64)
    pin_beliefs: dict[str, dict[str, Any]] | None = Field(
        None, description="entity name -> fact; perception and the policy cannot change a pinned fact")
    unpin_beliefs: list[str] | None = None


class BankControls(_Strict):
    disabled_verbs: list[Verb] | None = None
    harness_cap: int | None = Field(None, ge=0, le=64)
    clear_harness_cap: bool = False
    pin_entries: list[str] | None = Field(None, description="entry ids the evolver may not change or delete")
    unpin_entries: list[str] | None = None


class AuditPage(BaseModel):
    events: list[dict[str, Any]]
    next: int | None = Field(None, description="pass as `after` to read the next page; null at the end")
