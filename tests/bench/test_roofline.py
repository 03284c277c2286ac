"""bench/roofline.py: the FLOP count matches the model's parameters, and a short run reports positive limits."""

import json

from transformers import AutoConfig

from bench.roofline import flops_per_token, main, shapes


def test_flops_per_token_is_twice_the_matmul_parameters_plus_attention(tiny_model):
    cfg = AutoConfig.from_pretrained(str(tiny_model))
    layer = sum(i * o for _, i, o in shapes(cfg))
    head = cfg.hidden_size * cfg.vocab_size
    assert flops_per_token(cfg, 0, with_head=True) == 2 * (cfg.num_hidden_layers * layer + head)
    assert flops_per_token(cfg, 0, with_head=False) == 2 * cfg.num_hidden_layers * layer
    extra = flops_per_token(cfg, 100, with_head=False) - flops_per_token(cfg, 0, with_head=False)
    assert extra == cfg.num_hidden_layers * 4 * 100 * cfg.hidden_size


def test_a_short_run_prints_the_limits(tiny_model, tmp_path, capsys):
    out = tmp_path / "roofline.json"
    assert main(["--model", str(tiny_model), "--seconds", "0.05", "--threads", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["bandwidth_gbs"] > 0 and report["rows"][0]["dtype"] == "float32"
    for row in report["rows"]:
        assert row["prefill_tokens_per_s_limit"] > 0
        assert set(row["decode_tokens_per_s_limit"]) == {"1", "8", "32", "64"}
        assert all(v > 0 for v in row["decode_tokens_per_s_limit"].values())
    assert "| float32 |" in capsys.readouterr().out
