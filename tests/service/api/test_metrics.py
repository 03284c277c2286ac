"""/metrics after a scripted session: every family present, values match what the session did."""

import re

ADM = ["go to desk 1", "open drawer 1", "look"]


def scrape(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def total(samples, prefix, **labels):
    s = 0.0
    for name, v in samples.items():
        if name.split("{")[0] == prefix and all(f'{k}="{val}"' in name for k, val in labels.items()):
            s += v
    return s


async def test_metrics_reflect_a_session(app_factory):
    async with app_factory(temperature=1.0, seed=None) as c:
        before = scrape((await c.get("/metrics")).text)
        sid = (await c.post("/v1/sessions", json={"task": "open the drawer", "bank": "metrics"})).json()["session_id"]
        bodies = []
        for i in range(8):
            r = await c.post(f"/v1/sessions/{sid}/step", json={"observation": f"obs {i}", "admissible_actions": ADM})
            bodies.append(r.json())
        await c.post(f"/v1/sessions/{sid}/step", json={"observation": "x" * 100_000})  # 413
        await c.post(f"/v1/sessions/{sid}/end", json={"won": True})
        await c.post("/v1/banks/metrics/consolidate")
        text = (await c.get("/metrics")).text
        after = scrape(text)

    def delta(prefix, **labels):
        return total(after, prefix, **labels) - total(before, prefix, **labels)

    turns = [t for b in bodies for t in b["turns"]]
    harness = [t for t in turns if t["kind"] == "harness"]
    assert delta("evoharness_turns_total", kind="env") == 8
    assert delta("evoharness_turns_total", kind="harness") == len(harness)
    for verb in ("track", "commit", "recall", "note"):
        assert delta("evoharness_harness_calls_total", verb=verb) == sum(t["verb"] == verb for t in harness)
    assert delta("evoharness_harness_calls_per_step_count") == 8
    assert delta("evoharness_harness_calls_per_step_sum") == len(harness)
    prompt = sum(b["usage"]["prompt_tokens"] for b in bodies)
    completion = sum(b["usage"]["completion_tokens"] for b in bodies)
    assert delta("evoharness_tokens_total", kind="prompt") == prompt
    assert delta("evoharness_tokens_total", kind="completion") == completion
    for part in ("model", "store", "total"):
        assert delta("evoharness_step_seconds_count", part=part) == 8
    assert delta("evoharness_state_bytes_count") == 8
    assert delta("evoharness_steps_total", outcome="ok") == 8
    assert delta("evoharness_http_errors_total", status="413") == 1
    assert delta("evoharness_harness_calls_by_position_total") == len(harness)
    assert total(after, "evoharness_bank_entries", bank="metrics") >= 0
    assert delta("evoharness_sessions_created_total") == 1
    for category in ("general", "task_type", "mistakes", "search_priority", "notes"):
        assert total(after, "evoharness_bank_category_cap", bank="metrics", category=category) == 80  # bank_cap
    assert "evoharness_consolidation_ops_total" in text or "# TYPE evoharness_consolidation_ops" in text
    assert "evoharness_active_sessions" in text and "evoharness_invalid_outputs_total" in text
    # the in-process engine's own metrics share the endpoint
    assert re.search(r"^vllm:[a-z_]+", text, re.M), "no vllm:* metrics on /metrics"
