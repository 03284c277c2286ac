"""All configuration in one pydantic-settings class. Environment variables: EVOHARNESS_<FIELD>
(upper case), plus REDIS_URL. See the configuration table in README.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_POLICY_DIR = REPO_ROOT / "models" / "default-policy"
UNTRAINED_DIR = REPO_ROOT / "models" / "untrained-tiny"


def model_context_len(model_dir: str, cap: int = 4096) -> int:
    """The model's own context length (config.json max_position_embeddings), capped; `cap` if unknown."""

    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        return min(int(cfg.get("max_position_embeddings") or cap), cap)
    except (OSError, ValueError):
        return cap


def model_sampling_defaults(model_dir: str) -> dict:
    """{temperature, top_p} from the model folder's generation_config.json; greedy if it says nothing."""
    try:
        gen = json.loads((Path(model_dir) / "generation_config.json").read_text())
    except (OSError, ValueError):
        gen = {}
    sample = bool(gen.get("do_sample")) and float(gen.get("temperature") or 0.0) > 0.0
    return {"temperature": float(gen["temperature"]) if sample else 0.0,
            "top_p": float(gen.get("top_p") or 1.0) if sample else 1.0}


def default_model_path() -> str:
    """The shipped trained policy if present (a full checkpoint, or base + LoRA with a policy.json), else the tiny
    untrained model `make` builds."""
    if (DEFAULT_POLICY_DIR / "config.json").exists() or (DEFAULT_POLICY_DIR / "policy.json").exists():
        return str(DEFAULT_POLICY_DIR)
    return str(UNTRAINED_DIR)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EVOHARNESS_", env_file=None, extra="ignore")

    # storage
    redis_url: str | None = Field(None, validation_alias=AliasChoices("REDIS_URL", "EVOHARNESS_REDIS_URL"),
                                  description="redis:// URL; unset = `evoharness serve` starts a private redis-server")
    redis_cluster: bool = Field(False, description="connect with the Redis Cluster client")
    namespace: str = Field("evo", description="prefix of every Redis key")
    session_ttl_s: int = Field(7 * 86400, description="a session's keys expire this long after its last commit")
    idempotency_ttl_s: int = Field(86400, description="how long a stored step response answers a retry")
    step_lease_ms: int = Field(3_000, gt=0, description="single-writer lease per step (and per session/bank change), "
                               "renewed by a heartbeat while it runs: a replica that dies frees its sessions "
                               "this long after its last renewal")
    lease_heartbeat_ms: int = Field(None, gt=0, validate_default=False,
                                    description="how often a held lease is renewed; unset = step_lease_ms / 3; "
                                                "must be shorter than the lease")
    lease_takeover: bool = Field(True, description="take a step lease at once when the replica process holding it "
                                 "has died (its Redis Pub/Sub presence is gone) instead of after the lease lapses; "
                                 "off: wait for the lapse. Not on Redis Cluster (service/store/presence.py)")

    # engine
    engine: str = Field("vllm", description="vllm (in-process AsyncLLM) | remote (vLLM servers over HTTP) | scripted")
    model: str = Field(default_factory=default_model_path, description="model directory (HF format)")
    adapter: str | None = Field(None, description="optional LoRA adapter directory")
    remote_urls: list[str] = Field(default_factory=list, description="vLLM server base URLs for engine=remote")
    remote_policy: Literal["affinity", "least_outstanding", "round_robin"] = Field(
        "affinity", description="which of several remote_urls a generation goes to: affinity = one server per "
                                "session (its prompt prefix stays in that server's cache; docs/benchmarks.md (j)), "
                                "least_outstanding = fewest in flight, round_robin")
    max_model_len: int | None = Field(None, description="context length given to vLLM; unset = the model's "
                                                         "max_position_embeddings, at most 4096")
    kv_cache_gib: float = Field(1.0, description="KV cache size (CPU build: VLLM_CPU_KVCACHE_SPACE)")
    enforce_eager: bool = Field(False, description="skip torch.compile (fast start, slower decode)")
    dtype: str = Field("auto-cpu", description="weight dtype vLLM computes in: auto-cpu = bfloat16 on CPUs with "
                                               "AVX512-BF16 or AMX, float32 on others (emulated bf16 is ~2x slower), "
                                               "vLLM's auto on a GPU; or float32, bfloat16, auto (the checkpoint's)")
    engine_timeout_s: float = Field(60.0, description="one generation longer than this -> 504")
    step_timeout_s: float = Field(100.0, description="a whole step (all its turns) longer than this -> 504")
    max_running_steps: int = Field(16, ge=0, description="steps running the policy at once on this replica; the "
                                   "rest wait in line, a session just refused 409 busy here (a failover retry) "
                                   "first; 0 = no limit (service/admission.py)")
    admission_timeout_s: float = Field(30.0, gt=0, description="a step waiting longer than this for its slot -> 503 "
                                       "with Retry-After (nothing written)")

    # policy
    temperature: float = Field(None, ge=0.0, le=2.0, validate_default=False,
                               description="unset = the model folder's generation_config.json (temperature when "
                                           "do_sample is true), else 0 (greedy)")
    top_p: float = Field(None, gt=0.0, le=1.0, validate_default=False,
                         description="unset = the model folder's generation_config.json, else 1.0")
    seed: int | None = None
    harness_cap: int = Field(3, ge=0, description="default per-step harness-call cap of new sessions")
    recall_k: int = Field(3, ge=1, le=20, description="entries returned by recall / shown in always_on")
    bank_cap: int = Field(80, ge=1, description="per-category cap of a new bank")
    bank_seed: str | None = Field(None, description="the Experience a new bank starts with: a bank.json (an "
                                  "evolver state); unset = the served policy folder's bank.json if it has one (the "
                                  "bank it was evaluated with), else empty; 'none' = empty")

    # limits (4xx)
    max_body_bytes: int = Field(256_000, description="larger request bodies -> 413")
    max_observation_chars: int = Field(16_000, description="larger observations -> 413")
    max_admissible: int = Field(512, description="more admissible actions -> 422")
    max_action_chars: int = Field(200, description="longer admissible action -> 422")
    max_task_chars: int = Field(4_000, description="longer task text -> 422")
    max_steps_limit: int = Field(10_000, description="largest per-session step budget a client may ask for")

    # access (service/auth.py, service/rate_limit.py)
    auth: Literal["on", "off"] = Field("on", description="off = dev mode: no keys, every caller is admin of "
                                       "tenant 'default' (the service warns loudly at start)")
    api_keys_file: str | None = Field(None, description="JSON or YAML file of key records {id, role, tenant, sha256}")
    api_keys: str | None = Field(None, description="JSON list of key records (e.g. from a Kubernetes Secret)")
    rate_limit: int = Field(1200, ge=0, description="requests per key per rate window; 0 = no limit")
    rate_window_s: float = Field(60.0, gt=0, description="rate-limit window (fixed, per key, counted in Redis)")

    @model_validator(mode="after")
    def _sampling_from_model(self) -> Settings:
        """A policy folder says how it is meant to be sampled (generation_config.json), as HF checkpoints do."""
        if self.temperature is None or self.top_p is None:
            gen = model_sampling_defaults(self.model)
            if self.temperature is None:
                self.temperature = gen["temperature"]
            if self.top_p is None:
                self.top_p = gen["top_p"]
        return self

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> Settings:
        """A step may run longer than its lease (the heartbeat renews it); the heartbeat must beat within it."""
        if self.lease_heartbeat_ms is None:
            self.lease_heartbeat_ms = max(self.step_lease_ms // 3, 1)
        elif self.lease_heartbeat_ms >= self.step_lease_ms:
            raise ValueError(f"lease_heartbeat_ms ({self.lease_heartbeat_ms}) must be shorter than step_lease_ms "
                             f"({self.step_lease_ms}): the lease would lapse between two renewals")
        return self
