"""Check 5: do the weights plus a minimum KV cache fit on each card of the preference list?

The budget follows how the engines size memory: they claim a fraction of each GPU (vLLM's
`gpu_memory_utilization` defaults to 0.9), load the weights, keep some room for activations and
CUDA graphs, and give the rest to the KV cache. The minimum KV cache is one request of the planned
context length. The KV bytes per token come from config.json: two tensors (K and V) of
`num_key_value_heads x head_dim` per attention layer, or one compressed latent of
`kv_lora_rank + qk_rope_head_dim` for multi-head latent attention (DeepSeek-style), in BF16.
This is an estimate (no engine runs here); a card that fails it will not start the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailpod.engines.checkpoint import CheckpointReport
from tailpod.preflight.base import CheckSkipped, Context, Findings, Outcome
from tailpod.preflight.cloud import OfferSummary, remote_provider
from tailpod.provision.base import Offer

GIB = 1024**3
MEMORY_FRACTION = 0.90
RUNTIME_OVERHEAD_BYTES = int(1.5 * GIB)  # per GPU: CUDA context, activations, graphs
KV_DTYPE_BYTES = 2  # BF16/FP16 cache, the engines' default


def _lookup(config: dict[str, Any], key: str) -> Any:
    """A key of config.json or of its text_config (multimodal wrappers)."""
    if key in config:
        return config[key]
    text = config.get("text_config")
    return text.get(key) if isinstance(text, dict) else None


def _int(config: dict[str, Any], key: str) -> int | None:
    value = _lookup(config, key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def attention_layers(config: dict[str, Any]) -> int | None:
    """Layers that keep a KV cache: hybrid models' linear-attention layers keep none."""
    layers = _int(config, "num_hidden_layers")
    types = _lookup(config, "layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types if "attention" in str(t) and "linear" not in str(t))
    interval = _int(config, "full_attention_interval")
    if layers and interval:
        return layers // interval
    return layers


def kv_bytes_per_token(config: dict[str, Any], dtype_bytes: int = KV_DTYPE_BYTES) -> int | None:
    """KV cache bytes one token costs across all layers; None when config.json lacks the sizes."""
    layers = attention_layers(config)
    if not layers:
        return None
    lora_rank = _int(config, "kv_lora_rank")
    if lora_rank:
        rope = _int(config, "qk_rope_head_dim") or 0
        return layers * (lora_rank + rope) * dtype_bytes
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads") or heads
    head_dim = _int(config, "head_dim")
    hidden = _int(config, "hidden_size")
    if head_dim is None and heads and hidden:
        head_dim = hidden // heads
    if not kv_heads or not head_dim:
        return None
    return layers * 2 * kv_heads * head_dim * dtype_bytes


@dataclass(frozen=True)
class CardFit:
    gpu: str
    memory_gb: float
    count: int
    usable_bytes: int
    needed_bytes: int
    kv_tokens: int | None  # KV room after the weights, in tokens

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.usable_bytes

    def line(self) -> str:
        count = f"{self.count}x " if self.count > 1 else ""
        room = f", room for ~{self.kv_tokens:,} KV tokens" if self.kv_tokens is not None and \
            self.fits else ""
        return (f"{count}{self.gpu} ({self.memory_gb:g} GB): needs {self.needed_bytes / GIB:.1f} "
                f"of {self.usable_bytes / GIB:.1f} GiB usable{room}")


def card_fit(offer: Offer, weight_bytes: int, kv_per_token: int | None,
             context_length: int) -> CardFit | None:
    if not offer.gpu_memory_gb:
        return None
    count = max(1, offer.gpu_count)
    usable = int(offer.gpu_memory_gb * GIB * MEMORY_FRACTION * count) \
        - RUNTIME_OVERHEAD_BYTES * count
    kv_min = (kv_per_token or 0) * context_length
    room = usable - weight_bytes
    tokens = max(0, room // kv_per_token) if kv_per_token else None
    return CardFit(offer.gpu_type, float(offer.gpu_memory_gb), count, usable,
                   weight_bytes + kv_min, tokens)


def tensor_parallel_problem(config: dict[str, Any], gpu_count: int) -> str | None:
    """Why `gpu_count`-way tensor parallelism cannot split this model, or None. vLLM refuses a
    head count the TP size does not divide (ModelConfig.verify_with_parallel_config in
    vllm-project/vllm vllm/config/model.py), before any weight loads."""
    heads = _int(config, "num_attention_heads")
    if gpu_count > 1 and heads and heads % gpu_count:
        return (f"{heads} attention heads do not split over {gpu_count} GPUs: the engine "
                "refuses to start with this tensor-parallel size")
    return None


def check_fit(ctx: Context) -> Outcome:
    remote_provider(ctx)  # the local CPU engine has no GPU memory to check
    report: CheckpointReport = ctx.need("checkpoint")
    if report.weight_bytes is None:
        raise CheckSkipped("the checkpoint's weight sizes are unknown (see checkpoint)")
    config, _why = ctx.optional("model_config")
    summary: OfferSummary = ctx.need("offers")
    context = ctx.plan.context_length
    kv_per_token = kv_bytes_per_token(config) if config else None
    fits: list[CardFit] = []
    unknown: list[str] = []
    for offer in summary.offers:
        fit = card_fit(offer, report.weight_bytes, kv_per_token, context)
        if fit is None:
            unknown.append(offer.gpu_type)
        else:
            fits.append(fit)
    if not fits:
        raise CheckSkipped("the provider reported no GPU memory for these cards (see offers)")
    found = Findings()
    found.ok(f"weights {report.weight_bytes / GIB:.1f} GiB"
             + (f" + KV {kv_per_token * context / GIB:.2f} GiB for one {context:,}-token request"
                if kv_per_token else ""))
    if kv_per_token is None:
        found.warn("config.json lacks the attention sizes, so only the weights were compared",
                   "check the KV cache size in the engine's startup log")
    split_problem = tensor_parallel_problem(config, ctx.settings.gpu_count) if config else None
    if split_problem:
        found.fail(split_problem, "choose a GPU count that divides the attention heads")
    too_small = [f for f in fits if not f.fits]
    expected = summary.expected
    expected_fit = next((f for f in fits if expected is not None and f.gpu == expected.gpu_type),
                        None)
    fix = ("choose cards with more memory, more GPUs (TAILPOD_GPU_COUNT), a quantized "
           "checkpoint or a shorter --context-length")
    if len(too_small) == len(fits):
        found.fail("no card in the list fits: " + "; ".join(f.line() for f in too_small), fix)
    elif expected_fit is not None and not expected_fit.fits:
        found.fail(f"the expected card cannot fit: {expected_fit.line()}", fix)
    elif too_small:
        found.warn("cannot fit (a fallback there fails at engine start): "
                   + "; ".join(f.line() for f in too_small),
                   "remove " + ", ".join(f.gpu for f in too_small) + " from --gpu")
    for fit in fits:
        if fit.fits:
            found.ok(fit.line())
    if unknown:
        found.ok("memory unknown for " + ", ".join(unknown) + " (no offer)")
    data = {"weight_bytes": report.weight_bytes, "kv_bytes_per_token": kv_per_token,
            "context_length": context,
            "cards": [{"gpu": f.gpu, "memory_gb": f.memory_gb, "count": f.count,
                       "fits": f.fits, "needed_bytes": f.needed_bytes,
                       "usable_bytes": f.usable_bytes, "kv_tokens": f.kv_tokens}
                      for f in fits],
            "cannot_fit": [f.gpu for f in too_small]}
    return found.outcome(data)
