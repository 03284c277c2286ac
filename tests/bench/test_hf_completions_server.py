"""bench/hf_completions_server.py: transformers behind the service's grammar, on the remote engine's wire."""

import re

from starlette.testclient import TestClient

from bench.hf_completions_server import build_app
from service.policy.engines.vllm_remote import RemoteVLLMEngine

REGEX = r"<think>[a-z ]{0,30}</think><action>(go to desk 1|open drawer 2)</action>"


def test_completions_follow_the_regex_and_report_usage(tiny_model):
    with TestClient(build_app(str(tiny_model), "tiny", threads=1)) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/v1/models").json()["data"][0]["id"] == "tiny"
        texts = []
        for seed in range(4):
            r = client.post("/v1/completions", json={
                "model": "tiny", "prompt": "<|im_start|>user\npick an action<|im_end|>\n<|im_start|>assistant\n",
                "max_tokens": 80, "temperature": 1.0, "seed": seed, "structured_outputs": {"regex": REGEX}})
            assert r.status_code == 200, r.text
            body = r.json()
            texts.append(body["choices"][0]["text"])
            assert re.fullmatch(REGEX, texts[-1]), texts[-1]
            assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] > 0
        r = client.post("/v1/completions", json={"prompt": "no max_tokens"})
        assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]


async def test_the_remote_engine_reads_its_answers(tiny_model):
    import httpx

    from service.policy.engines.base import GenerationRequest

    app = build_app(str(tiny_model), "tiny", threads=1)
    eng = RemoteVLLMEngine(["http://hf"], transport=httpx.ASGITransport(app=app))
    await eng.start()
    try:
        assert eng.model_id == "tiny"
        g = await eng.generate(GenerationRequest(prompt="<|im_start|>user\nhi<|im_end|>\n", regex=REGEX,
                                                 max_tokens=80))
        assert re.fullmatch(REGEX, g.text) and g.prompt_tokens > 0 and g.completion_tokens > 0
    finally:
        await eng.close()
