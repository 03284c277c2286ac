"""Prometheus metrics (prefix `evoharness_`). The in-process vLLM engine's `vllm:*` families land
in the same default registry, so one `/metrics` shows both."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

HARNESS_CALLS = Counter("evoharness_harness_calls", "Harness calls by verb and outcome", ["verb", "outcome"])
TURNS = Counter("evoharness_turns", "Policy turns by kind (harness | env)", ["kind"])
HARNESS_PER_STEP = Histogram("evoharness_harness_calls_per_step", "Harness calls inside one step",
                             buckets=(0, 1, 2, 3, 4, 6, 8, 16))
TOKENS = Counter("evoharness_tokens", "Tokens by kind (prompt | completion) and purpose (env | harness turn)",
                 ["kind", "purpose"])
STEP_SECONDS = Histogram("evoharness_step_seconds", "Seconds per step by part (model | store | total)", ["part"],
                         buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
HARNESS_CALL_SECONDS = Histogram("evoharness_harness_call_seconds", "Model seconds spent per harness call",
                                 ["verb"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
STATE_BYTES = Histogram("evoharness_state_bytes", "Bytes of session state after each commit",
                        buckets=(512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072))
BANK_ENTRIES = Gauge("evoharness_bank_entries", "Entries in an Experience bank by category", ["bank", "category"])
BANK_CAP = Gauge("evoharness_bank_category_cap", "Entry cap of an Experience bank's category (the evolver evicts "
                 "above it)", ["bank", "category"])
CONSOLIDATION_OPS = Counter("evoharness_consolidation_ops", "Evolver operations by op", ["bank", "op"])
INVALID_OUTPUTS = Counter("evoharness_invalid_outputs", "Policy outputs that failed to parse")
SESSIONS_CREATED = Counter("evoharness_sessions_created", "Sessions created (the denominator of cost per session)")
ACTIVE_SESSIONS = Gauge("evoharness_active_sessions", "Sessions created and not yet ended or deleted",
                        multiprocess_mode="livemostrecent")
STEPS = Counter("evoharness_steps", "Step requests by outcome (ok | replay | conflict | error ...)", ["outcome"])
HARNESS_BY_POSITION = Counter("evoharness_harness_calls_by_position",
                              "Harness calls by the episode step at which they happen (bucketed)",
                              ["bucket", "verb"])
ADMISSION_RUNNING = Gauge("evoharness_admission_running", "Steps running the policy on this replica (at most "
                          "EVOHARNESS_MAX_RUNNING_STEPS)", multiprocess_mode="livesum")
ADMISSION_WAITING = Gauge("evoharness_admission_waiting", "Steps waiting for a slot to run the policy",
                          multiprocess_mode="livesum")
ADMISSION_WAIT = Histogram("evoharness_admission_wait_seconds", "Seconds a step waited for its slot, by class "
                           "(urgent: its session was just refused 409 busy here, e.g. the retry after a failover)",
                           ["klass"], buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
LEASE_TAKEOVERS = Counter("evoharness_lease_takeovers", "Step leases taken at once from a replica process that died "
                          "mid-step (service/store/presence.py)")
ERRORS = Counter("evoharness_http_errors", "Error responses by status", ["status"])

POSITION_BUCKETS = ((0, 4, "0-4"), (5, 9, "5-9"), (10, 19, "10-19"), (20, 39, "20-39"), (40, 79, "40-79"))


def position_bucket(env_step: int) -> str:
    for lo, hi, name in POSITION_BUCKETS:
        if lo <= env_step <= hi:
            return name
    return "80+"


_CHILDREN: dict = {}


def child(metric, *labels):
    """`metric.labels(*labels)`, looked up once per label set (the hot path records about ten per step).
    Label values here come from small fixed sets (kinds, verbs, outcomes, buckets, parts)."""
    key = (metric, labels)
    c = _CHILDREN.get(key)
    if c is None:
        c = _CHILDREN[key] = metric.labels(*labels)
    return c
