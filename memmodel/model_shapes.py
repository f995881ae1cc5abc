"""Attention shapes of language models: ``--model llama-3-8b`` instead of ``--heads 32
--kv-heads 8 --d 128``.

A model is a bundled name (:data:`MODELS`, each entry citing the ``config.json`` it was read
from) or a Hugging Face ``config.json`` (a file, or a folder holding one). From a config,
memmodel reads the query heads (``num_attention_heads``; GPT-2's ``n_head``), the key/value
heads (``num_key_value_heads``; default: the query heads) and the head dimension
(``head_dim``, else the hidden size over the heads: ``hidden_size``, GPT-2's ``n_embd``). A
multimodal config's ``text_config`` is read when the top level has no heads.

Sliding windows: ``sliding_window`` where every layer has it (Mistral-7B v0.1, Phi-3; not
where ``use_sliding_window`` is false), taken as the window of the workload; where only some
layers do (``layer_types``, Gemma 2's every other layer, ``max_window_layers``), the model's
full-attention layer is the default and its note says how to model the others.

Multi-head latent attention (DeepSeek-V2/V3, Kimi K2: configs with ``kv_lora_rank``) is read
as :class:`MLAShape` (``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``,
``v_head_dim``) and modelled in one of two forms (:meth:`ModelShape.attention`): prefill as
attention of every head with d = qk_nope + qk_rope (192) and d_v = v_head_dim (128); decoding
in the absorbed form, every query head on one latent K/V head of d = kv_lora_rank + qk_rope
(576), V its first kv_lora_rank (512). Chunked local attention (Llama 4's ``attention_chunk_size``,
its layers by ``layer_types`` or ``no_rope_layers``) is kept as ``chunk_layers`` and ``chunk``,
modelled by ``--chunk`` (:func:`memmodel.workload.chunked`). What memmodel does not model of a
listed model is said in its ``note``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .errors import WorkloadError
from .frozen import frozen


@frozen
class MLAShape:
    """Multi-head latent attention's sizes (a config's ``kv_lora_rank``, ``qk_rope_head_dim``,
    ``qk_nope_head_dim``, ``v_head_dim``)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    @property
    def prefill_dims(self) -> tuple[int, int]:
        """(d, d_v) of the prefill form: qk_nope + qk_rope, v_head_dim (192, 128 in DeepSeek-V3)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim, self.v_head_dim

    @property
    def absorbed_dims(self) -> tuple[int, int]:
        """(d, d_v) of the absorbed decode form: kv_lora_rank + qk_rope, kv_lora_rank (576, 512)."""
        return self.kv_lora_rank + self.qk_rope_head_dim, self.kv_lora_rank


#: query tokens per request up to which an MLA model with --n-kv > --n decodes in the absorbed form
MLA_DECODE_TOKENS = 16


@frozen
class AttentionShape:
    """The attention of one of a model's layers as a workload takes it: heads, K/V heads, head
    dims (``d_v`` None: V's is Q's) and, for MLA, which form and why."""

    heads: int
    kv_heads: int
    d: int
    d_v: int | None = None
    form: str = ""  # "", "mla-prefill" or "mla-absorbed"
    note: str = ""


@frozen
class ModelShape:
    """The attention shape of one model: every layer's, as memmodel models it."""

    name: str
    heads: int
    kv_heads: int
    head_dim: int
    #: where the figures come from: the config.json they were read from
    source: str
    #: what memmodel does not model of this model's attention, or how to model its other layers
    note: str = ""
    #: the sliding window every layer attends within (None: full attention, or only some layers)
    window: int | None = None
    #: layers attending within ``local_window`` and layers of full attention (0, 0: not known)
    local_layers: int = 0
    global_layers: int = 0
    local_window: int | None = None
    #: attention layers (the config's num_hidden_layers; 0: not known)
    layers: int = 0
    #: multi-head latent attention's sizes (None: standard attention)
    mla: MLAShape | None = None
    #: layers of chunked local attention (each query sees its own ``chunk``-token chunk: Llama 4's
    #: attention_chunk_size) and the chunk; the others are full attention
    chunk_layers: int = 0
    chunk: int | None = None

    def attention(self, n: Any = None, n_kv: Any = None) -> AttentionShape:
        """The layer's attention for ``n`` queries over ``n_kv`` keys (scalars, or lists a sweep
        gives): the model's heads and head dim; with MLA, prefill (n > 1, or n = n_kv) as every
        head at d = qk_nope + qk_rope, d_v = v_head_dim, and decoding (n_kv > n, at most
        :data:`MLA_DECODE_TOKENS` query tokens) in the absorbed form, one latent K/V head."""
        if self.mla is None:
            return AttentionShape(self.heads, self.kv_heads, self.head_dim)
        ns = [int(x) for x in _values(n)] or [1]
        kvs = [int(x) for x in _values(n_kv)] or ns
        decoding = [k > q and q <= MLA_DECODE_TOKENS for q in ns for k in kvs]
        if any(decoding) and not all(decoding):
            raise WorkloadError(
                f"--model {self.name}: multi-head latent attention decodes (--n-kv > --n, at most "
                f"{MLA_DECODE_TOKENS} query tokens) in the absorbed form and prefills as attention of every head: "
                "give decoding and prefill shapes apart"
            )
        m = self.mla
        if all(decoding):
            d, dv = m.absorbed_dims
            return AttentionShape(
                self.heads,
                1,
                d,
                dv,
                "mla-absorbed",
                f"multi-head latent attention, decoding in the absorbed form: {self.heads} query heads on one latent "
                f"K/V head, d = kv_lora_rank + qk_rope_head_dim = {d}, d_v = kv_lora_rank = {dv} (V is the first "
                f"{dv} of the same cached row: {d} elements a token read once)",
            )
        d, dv = m.prefill_dims
        return AttentionShape(
            self.heads,
            self.heads,
            d,
            dv,
            "mla-prefill",
            f"multi-head latent attention, prefill form: {self.heads} heads, d = qk_nope_head_dim + qk_rope_head_dim "
            f"= {d}, d_v = v_head_dim = {dv} (K and V up-projected from the latent cache)",
        )

    def kv_cache_bytes_per_token(self, element_bytes: int) -> int:
        """Bytes one token's K/V cache holds in one layer: MLA's latent row (kv_lora_rank +
        qk_rope_head_dim elements), else K and V of every K/V head."""
        if self.mla is not None:
            return (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim) * element_bytes
        return 2 * self.kv_heads * self.head_dim * element_bytes

    @property
    def repository(self) -> str:
        """``meta-llama/Meta-Llama-3-8B`` for a source on the Hugging Face Hub, else the source."""
        prefix, suffix = "https://huggingface.co/", "/blob/main/config.json"
        if self.source.startswith(prefix) and self.source.endswith(suffix):
            return self.source[len(prefix) : -len(suffix)]
        return self.source

    def summary(self) -> str:
        if self.mla is not None:
            m = self.mla
            return (
                f"{self.name}: {self.heads} heads, multi-head latent attention (kv_lora_rank {m.kv_lora_rank}, "
                f"qk_rope_head_dim {m.qk_rope_head_dim}, qk_nope_head_dim {m.qk_nope_head_dim}, v_head_dim "
                f"{m.v_head_dim}) ({self.source})"
            )
        kv = f"{self.kv_heads} KV heads" if self.kv_heads != self.heads else "as many KV heads"
        return f"{self.name}: {self.heads} heads, {kv}, head dim {self.head_dim} ({self.source})"


def _values(x: Any) -> list[Any]:
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return list(x)
    try:
        import numpy as np

        return [int(v) for v in np.asarray(x).ravel()]
    except (TypeError, ValueError):
        return [x]


#: DeepSeek-V3's MLA (and DeepSeek-R1's, DeepSeek-V2's, Kimi K2's): kv_lora_rank 512,
#: qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128
DEEPSEEK_MLA = MLAShape(512, 64, 128, 128)


def mla_model(name: str, heads: int, repo: str, layers: int) -> ModelShape:
    """A bundled MLA model (its config.json's num_attention_heads, num_hidden_layers and MLA sizes)."""
    return ModelShape(
        name,
        heads,
        heads,
        DEEPSEEK_MLA.qk_nope_head_dim + DEEPSEEK_MLA.qk_rope_head_dim,
        _HF.format(repo),
        "multi-head latent attention: prefill at d 192 / d_v 128, decoding (--n-kv > --n) in the absorbed form "
        "(one latent K/V head, d 576 / d_v 512)",
        layers=layers,
        mla=DEEPSEEK_MLA,
    )


_HF = "https://huggingface.co/{}/blob/main/config.json"


def mixed_note(local: int, total: int, window: int) -> str:
    """What a model of local and global layers is modelled as, and how to model the others."""
    return (
        f"{local} of its {total} layers attend within a {window}-token sliding window: one layer is modelled as given "
        f"(full attention unless --window {window}); --layers all counts every layer"
    )


def chunk_note(chunked: int, total: int, chunk: int) -> str:
    """What a model of chunked and global layers is modelled as, and how to model the others."""
    return (
        f"{chunked} of its {total} layers attend within their own {chunk}-token chunk: one layer is modelled as given "
        f"(full attention unless --chunk {chunk}); --layers all counts every layer"
    )


#: Bundled models: name -> shape, read from each model's config.json on the Hugging Face Hub.
MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape("gpt2", 12, 12, 64, _HF.format("openai-community/gpt2"), layers=12),
        ModelShape("gpt2-xl", 25, 25, 64, _HF.format("openai-community/gpt2-xl"), layers=48),
        ModelShape("llama-2-7b", 32, 32, 128, _HF.format("meta-llama/Llama-2-7b-hf"), layers=32),
        ModelShape("llama-2-70b", 64, 8, 128, _HF.format("meta-llama/Llama-2-70b-hf"), layers=80),
        ModelShape("llama-3-8b", 32, 8, 128, _HF.format("meta-llama/Meta-Llama-3-8B"), layers=32),
        ModelShape("llama-3-70b", 64, 8, 128, _HF.format("meta-llama/Meta-Llama-3-70B"), layers=80),
        ModelShape("llama-3.1-405b", 128, 8, 128, _HF.format("meta-llama/Llama-3.1-405B"), layers=126),
        ModelShape("llama-3.2-1b", 32, 8, 64, _HF.format("meta-llama/Llama-3.2-1B"), layers=16),
        ModelShape("llama-3.2-3b", 24, 8, 128, _HF.format("meta-llama/Llama-3.2-3B"), layers=28),
        ModelShape("mistral-7b", 32, 8, 128, _HF.format("mistralai/Mistral-7B-v0.1"), window=4096, layers=32),
        ModelShape("mixtral-8x7b", 32, 8, 128, _HF.format("mistralai/Mixtral-8x7B-v0.1"), layers=32),
        ModelShape("mixtral-8x22b", 48, 8, 128, _HF.format("mistralai/Mixtral-8x22B-v0.1"), layers=56),
        ModelShape("qwen2.5-7b", 28, 4, 128, _HF.format("Qwen/Qwen2.5-7B"), layers=28),
        ModelShape("qwen2.5-72b", 64, 8, 128, _HF.format("Qwen/Qwen2.5-72B"), layers=80),
        # Gemma 2: every other layer of 42 (9b) and 46 (27b) attends within 4096 tokens (its config's
        # sliding_window and the modelling code's alternation)
        ModelShape(
            "gemma-2-9b", 16, 8, 256, _HF.format("google/gemma-2-9b"), mixed_note(21, 42, 4096), None, 21, 21, 4096, 42
        ),
        ModelShape(
            "gemma-2-27b",
            32,
            16,
            128,
            _HF.format("google/gemma-2-27b"),
            mixed_note(23, 46, 4096),
            None,
            23,
            23,
            4096,
            46,
        ),
        # Gemma 3: every 6th layer of full attention, the others within 1024 tokens (sliding_window 1024,
        # sliding_window_pattern 6: transformers' Gemma3TextConfig); text_config's heads, K/V heads and
        # head_dim (27B: 32/16/128, 62 layers; 12B: 16/8/256, 48; 4B: 8/4/256, 34)
        *(
            ModelShape(
                f"gemma-3-{size}",
                heads,
                kv,
                hd,
                _HF.format(f"google/gemma-3-{size}-it"),
                mixed_note(layers - layers // 6, layers, 1024),
                None,
                layers - layers // 6,
                layers // 6,
                1024,
                layers,
            )
            for size, heads, kv, hd, layers in (
                ("4b", 8, 4, 256, 34),
                ("12b", 16, 8, 256, 48),
                ("27b", 32, 16, 128, 62),
            )
        ),
        # gpt-oss: layer_types alternate sliding_attention (128 tokens) and full_attention; 64 heads
        # over 8 K/V heads of 64. Its attention sinks (one learned logit a head in the softmax's
        # denominator) add a term a row, not modelled
        *(
            ModelShape(
                f"gpt-oss-{size}",
                64,
                8,
                64,
                _HF.format(f"openai/gpt-oss-{size}"),
                mixed_note(layers // 2, layers, 128)
                + "; its attention sinks (a learned logit a head) are not modelled",
                None,
                layers // 2,
                layers // 2,
                128,
                layers,
            )
            for size, layers in (("20b", 24), ("120b", 36))
        ),
        # Llama 4: 40 heads over 8 K/V heads of 128, 48 layers; attention_chunk_size 8192 on the
        # rotary layers, every 4th layer (NoPE) full attention (no_rope_layer_interval 4)
        *(
            ModelShape(
                f"llama-4-{size}",
                40,
                8,
                128,
                _HF.format(repo),
                chunk_note(36, 48, 8192),
                layers=48,
                chunk_layers=36,
                chunk=8192,
            )
            for size, repo in (
                ("scout", "meta-llama/Llama-4-Scout-17B-16E"),
                ("maverick", "meta-llama/Llama-4-Maverick-17B-128E"),
            )
        ),
        # Qwen3: full attention in every layer (use_sliding_window false)
        ModelShape("qwen3-8b", 32, 8, 128, _HF.format("Qwen/Qwen3-8B"), layers=36),
        ModelShape("qwen3-32b", 64, 8, 128, _HF.format("Qwen/Qwen3-32B"), layers=64),
        ModelShape("qwen3-30b-a3b", 32, 4, 128, _HF.format("Qwen/Qwen3-30B-A3B"), layers=48),
        ModelShape("qwen3-235b-a22b", 64, 4, 128, _HF.format("Qwen/Qwen3-235B-A22B"), layers=94),
        # multi-head latent attention (num_attention_heads and num_hidden_layers of each config;
        # the MLA sizes of DEEPSEEK_MLA in all five)
        mla_model("deepseek-v3", 128, "deepseek-ai/DeepSeek-V3", 61),
        mla_model("deepseek-r1", 128, "deepseek-ai/DeepSeek-R1", 61),
        mla_model("deepseek-v2", 128, "deepseek-ai/DeepSeek-V2", 60),
        mla_model("deepseek-v2-lite", 16, "deepseek-ai/DeepSeek-V2-Lite", 27),
        mla_model("kimi-k2", 64, "moonshotai/Kimi-K2-Instruct", 61),
    )
}

#: Keys of a config.json, in the order they are tried.
HEADS_KEYS = ("num_attention_heads", "n_head", "num_heads")
KV_HEADS_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
#: Keys that mark multi-head latent attention (DeepSeek-V2/V3), read as :class:`MLAShape`.
MLA_KEYS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


def is_path(spec: str) -> bool:
    return "/" in spec or os.sep in spec or spec.endswith(".json") or os.path.isdir(spec)


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def load_model(spec: str) -> ModelShape:
    """A bundled model by name (case and separators do not matter: ``Llama-3-8B``,
    ``llama3-8b``) or a Hugging Face ``config.json`` (or a folder holding one)."""
    text = str(spec).strip()
    if not text:
        raise WorkloadError("--model: give a model name (see 'memmodel compare --help') or a config.json")
    if is_path(text):
        return from_config_file(text)
    by_norm = {_norm(name): m for name, m in MODELS.items()}
    if _norm(text) in by_norm:
        return by_norm[_norm(text)]
    import difflib

    close = difflib.get_close_matches(text.lower(), list(MODELS), n=2, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise WorkloadError(
        f"unknown model {text!r}: {hint}known: {', '.join(MODELS)} (or give a Hugging Face config.json)"
    )


def from_config_file(path: str) -> ModelShape:
    """The shape in a Hugging Face ``config.json`` at ``path`` (a folder: its config.json)."""
    from .fileio import read_text

    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    text = read_text(file, what="config.json", error=WorkloadError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{file}: not JSON (line {exc.lineno}: {exc.msg})") from None
    name = os.path.basename(os.path.dirname(os.path.abspath(file))) if os.path.basename(file) == "config.json" else ""
    return from_config(data, file, name=name or os.path.splitext(os.path.basename(file))[0])


def from_config(data: Any, where: str = "config", *, name: str | None = None) -> ModelShape:
    """The shape in a parsed Hugging Face config (a dict); errors name ``where`` and the key."""
    if not isinstance(data, dict):
        raise WorkloadError(f"{where}: a config.json holds an object (num_attention_heads, ...), not {_kind(data)}")
    config = data
    if not any(k in data for k in HEADS_KEYS) and isinstance(data.get("text_config"), dict):
        config = data["text_config"]
        where = f"{where} -> text_config"
    heads = _int(config, HEADS_KEYS, where, required=True)
    if config.get("kv_lora_rank") is not None:
        return _mla_from_config(
            config, heads, where, name or str(data.get("_name_or_path") or data.get("model_type") or where)
        )
    assert heads is not None
    kv_heads = _int(config, KV_HEADS_KEYS, where) or heads
    if config.get("multi_query") is True and not any(k in config for k in KV_HEADS_KEYS):
        kv_heads = 1  # Falcon-style multi-query attention
    head_dim = _int(config, ("head_dim",), where)
    if head_dim is None:
        hidden = _int(config, HIDDEN_KEYS, where, required=True)
        assert hidden is not None
        if hidden % heads:
            raise WorkloadError(f"{where}: the hidden size {hidden} is not a multiple of the {heads} heads")
        head_dim = hidden // heads
    if heads % kv_heads:
        raise WorkloadError(f"{where}: {kv_heads} key/value heads do not divide the {heads} attention heads")
    label = name or str(data.get("_name_or_path") or data.get("model_type") or where)
    layers = _int(config, ("num_hidden_layers", "n_layer", "num_layers"), where) or 0
    chunk = _int(config, ("attention_chunk_size",), where)
    if chunk is not None:
        chunked, total = _chunked_layers(config, layers, where)
        if chunked == 0:
            return ModelShape(label, heads, kv_heads, head_dim, where, layers=layers or total)
        return ModelShape(
            label,
            heads,
            kv_heads,
            head_dim,
            where,
            chunk_note(chunked, total, chunk),
            layers=layers or total,
            chunk_layers=chunked,
            chunk=chunk,
        )
    window = _int(config, ("sliding_window",), where)
    if window is None or config.get("use_sliding_window") is False:
        return ModelShape(label, heads, kv_heads, head_dim, where, layers=layers)
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        local = sum(1 for t in types if isinstance(t, str) and "sliding" in t)
        total = len(types)
    elif config.get("model_type") in ("gemma2", "cohere2") or config.get("sliding_window_pattern"):
        # Gemma 2 alternates (every other layer local); Gemma 3 and Cohere 2: every Nth layer global
        every = int(config.get("sliding_window_pattern") or 2)
        total = layers
        local = total - total // every if every > 1 else total
    elif isinstance(config.get("max_window_layers"), int) and 0 < config["max_window_layers"] < layers:
        total, local = layers, layers - int(config["max_window_layers"])  # Qwen2: the first layers are full
    else:
        return ModelShape(label, heads, kv_heads, head_dim, where, window=window, layers=layers)
    if local == total or not total:
        return ModelShape(label, heads, kv_heads, head_dim, where, window=window, layers=layers or total)
    if local == 0:
        return ModelShape(label, heads, kv_heads, head_dim, where, layers=layers or total)
    return ModelShape(
        label,
        heads,
        kv_heads,
        head_dim,
        where,
        mixed_note(local, total, window),
        None,
        local,
        total - local,
        window,
        layers or total,
    )


def _chunked_layers(config: dict[str, Any], layers: int, where: str) -> tuple[int, int]:
    """(chunked layers, layers) of a config with ``attention_chunk_size``, as transformers' Llama 4
    reads it: ``layer_types`` ("chunked_attention" / "full_attention") where given, else
    ``no_rope_layers`` (1: a layer with rotary embeddings, which attends within its chunk; 0: a
    NoPE layer of full attention), else every ``no_rope_layer_interval``-th layer (default 4) NoPE."""
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types if isinstance(t, str) and "chunk" in t), len(types)
    flags = config.get("no_rope_layers")
    if isinstance(flags, list) and flags:
        if any(isinstance(f, bool) or f not in (0, 1) for f in flags):
            raise WorkloadError(f"{where} -> no_rope_layers: a list of 0 and 1 (one a layer), not {flags!r}")
        return sum(flags), len(flags)
    if not layers:
        raise WorkloadError(
            f"{where}: attention_chunk_size without num_hidden_layers: which layers are chunked is not known"
        )
    interval = _int(config, ("no_rope_layer_interval",), where) or 4
    return layers - layers // interval, layers


def _int(config: dict[str, Any], keys: tuple[str, ...], where: str, *, required: bool = False) -> int | None:
    for key in keys:
        if key in config and config[key] is not None:
            value = config[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise WorkloadError(f"{where} -> {key}: {value!r} is not a positive whole number")
            return value
    if required:
        raise WorkloadError(f"{where}: no {' or '.join(keys)}: not a transformer config.json memmodel can read")
    return None


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _mla_from_config(config: dict[str, Any], heads: int, where: str, label: str) -> ModelShape:
    """A config with ``kv_lora_rank``: multi-head latent attention (every MLA key required)."""
    missing = [k for k in MLA_KEYS if config.get(k) is None]
    if missing:
        raise WorkloadError(
            f"{where}: kv_lora_rank marks multi-head latent attention, which also needs {', '.join(missing)} "
            f"(the config gives {', '.join(k for k in MLA_KEYS if k not in missing)})"
        )
    sizes = {k: _int(config, (k,), where, required=True) for k in MLA_KEYS}
    mla = MLAShape(*(int(sizes[k] or 0) for k in MLA_KEYS))
    layers = _int(config, ("num_hidden_layers", "n_layer", "num_layers"), where) or 0
    return ModelShape(
        label,
        heads,
        heads,
        mla.qk_nope_head_dim + mla.qk_rope_head_dim,
        where,
        "multi-head latent attention (kv_lora_rank): prefill as every head at d = qk_nope + qk_rope, decoding "
        "(--n-kv > --n) in the absorbed form",
        layers=layers,
        mla=mla,
    )
