"""Checks 3 and 4: Hugging Face access to the model, and what the checkpoint holds.

Access is proven the way the pod will need it: by reading a file (`config.json`) with the token,
because the Hub answers model *info* for a gated repository to anyone; only files are refused.
The checkpoint report is `tailpod.engines.checkpoint.inspect_checkpoint` (headers only).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from tailpod.engines.adapters import get_adapter
from tailpod.engines.checkpoint import (
    CONFIG,
    CheckpointReport,
    HubSource,
    LocalSource,
    arm_refusal,
    inspect_checkpoint,
)
from tailpod.engines.local_install import check_gguf, check_model
from tailpod.errors import AuthError, ConfigError, ProviderError
from tailpod.preflight.base import CheckSkipped, Context, Fact, Findings, Outcome
from tailpod.provision.providers import canonical_name

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
TOKEN_HINT = "create a read token at https://huggingface.co/settings/tokens and set HF_TOKEN"


def model_ref(ctx: Context) -> str:
    model = ctx.settings.model.strip()
    if not model:
        raise ConfigError("no model set",
                          hint="pass --model ORG/NAME (or a checkpoint directory), or set "
                               "TAILPOD_MODEL")
    return model


def is_local_dir(model: str) -> bool:
    return Path(model).expanduser().is_dir()


def _is_local_provider(ctx: Context) -> bool:
    try:
        return canonical_name(ctx.settings.provider) == "local"
    except ConfigError:
        return False


def _local_gguf(ctx: Context) -> bool:
    """llama.cpp on this machine serves a GGUF file: no Hub, no safetensors to inspect."""
    try:
        return _is_local_provider(ctx) and get_adapter(ctx.settings.engine).name == "llamacpp"
    except ConfigError:
        return False


# -- facts ----------------------------------------------------------------------------------------
def _hf_user(ctx: Context) -> dict[str, Any] | None:
    """whoami for HF_TOKEN: None without a token; AuthError when the Hub rejects it."""
    token = ctx.settings.hf_token
    if not token:
        return None
    # huggingface_hub stays lazy: a heavy import only this check with an HF token needs.
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    endpoint = ctx.settings.hf_url.rstrip("/")
    try:
        info = HfApi(endpoint=endpoint, token=False).whoami(token=token.reveal())
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise AuthError(f"{endpoint} rejected HF_TOKEN (HTTP {status})",
                            hint=TOKEN_HINT) from None
        raise ProviderError(f"{endpoint} failed the token check (HTTP {status})") from None
    except Exception as exc:  # transport errors differ across huggingface_hub versions
        raise ProviderError(f"cannot reach {endpoint} to check HF_TOKEN "
                            f"({exc.__class__.__name__})",
                            hint="check the network or TAILPOD_HF_URL") from None
    return info if isinstance(info, dict) else {}


def _model_config(ctx: Context) -> dict[str, Any]:
    """config.json, read with HF_TOKEN for a Hub repository: this is the access check."""
    model = model_ref(ctx)
    if is_local_dir(model):
        path = Path(model).expanduser()
        config = LocalSource(path).read_json(CONFIG)
        if config is None:
            raise ConfigError(f"{path} is not a checkpoint (no {CONFIG})")
        return config
    if model.startswith(("/", "./", "../", "~")) or not _REPO_ID.match(model):
        raise ConfigError(f"{model} is neither a local directory nor a Hub repo id (org/name)")
    token = ctx.settings.hf_token.reveal() if ctx.settings.hf_token else None
    source = HubSource(model, ctx.settings.hf_url, token, timeout=10.0)
    try:
        config = source.read_json(CONFIG)
    finally:
        source.close()
    if config is None:
        raise ConfigError(f"{model} has no {CONFIG}; it is not a transformers checkpoint")
    return config


def _checkpoint(ctx: Context) -> CheckpointReport:
    model = model_ref(ctx)
    if not is_local_dir(model):
        # A rejected token or no access is reported once, by the Hugging Face check.
        ctx.need("hf_user")
        ctx.need("model_config")
    return inspect_checkpoint(model, ctx.settings)


FACTS = (
    Fact("hf_user", "the Hugging Face token check", "hf", _hf_user),
    Fact("model_config", "the model's config.json", "hf", _model_config),
    Fact("checkpoint", "the checkpoint report", "checkpoint", _checkpoint),
)


# -- checks ---------------------------------------------------------------------------------------
def check_hf(ctx: Context) -> Outcome:
    model = ctx.settings.model.strip()
    if not model:
        raise CheckSkipped("no model set (see checkpoint)")
    if is_local_dir(model):
        raise CheckSkipped("a local checkpoint directory needs no Hub access")
    if _local_gguf(ctx):
        raise CheckSkipped("llama.cpp on this machine serves a local GGUF file")
    found = Findings()
    endpoint = ctx.settings.hf_url.rstrip("/")
    user = ctx.fact("hf_user")
    data: dict[str, Any] = {"endpoint": endpoint, "model": model}
    if user is None:
        found.ok("no HF_TOKEN")
    else:
        role = ((user.get("auth") or {}).get("accessToken") or {}).get("role")
        data["token_role"] = role
        found.ok(f"HF_TOKEN valid (user {user.get('name', '?')}, {role or 'unknown'} token)")
        if role == "write":
            found.warn("HF_TOKEN can write to your repositories, and the pod gets it in its "
                       "environment",
                       "use a read-only or fine-grained read token for tailpod")
    ctx.fact("model_config")
    found.ok(f"{model} is readable" + (" with the token" if user is not None else " (public)"))
    return found.outcome(data)


def _short_list(items: list[str], limit: int = 3) -> str:
    head = ", ".join(items[:limit])
    return head + (f" and {len(items) - limit} more" if len(items) > limit else "")


def check_checkpoint(ctx: Context) -> Outcome:
    """MTP head, quantization, the ignore-list trap and the weight bytes."""
    model = model_ref(ctx)
    found = Findings()
    if _local_gguf(ctx):
        check_gguf(model, "model")
        found.ok(f"{model} is a GGUF file (llama-server reads its own metadata; no MTP check)")
        return found.outcome({"model": model, "format": "gguf"})
    local_provider = _is_local_provider(ctx)
    if local_provider:
        check_model(model)  # the local engine serves a directory, offline
    elif is_local_dir(model):
        found.warn(f"{model} is a directory on this machine; a rented pod downloads the model "
                   "from the Hub, so it needs a repo id",
                   "pass --model ORG/NAME for cloud providers")
    report: CheckpointReport = ctx.fact("checkpoint")
    mtp = report.mtp
    arch = report.architecture or report.model_type or "unknown architecture"
    found.ok(f"{arch}, {report.num_hidden_layers or '?'} layers")
    if mtp.present:
        found.ok(f"MTP head: {mtp.layers} layer(s), {mtp.naming} naming, "
                 f"{'/'.join(mtp.dtypes) or '?'}")
    elif mtp.declared_layers and report.tensor_count:
        found.fail(f"config.json declares {mtp.declared_layers} MTP layer(s) but the weights have "
                   "none: engines refuse the draft or draft from uninitialised weights",
                   "use the checkpoint's full release (with its MTP weights)")
    elif not ctx.plan.arms:
        found.warn("no MTP head: MTP speculation has no draft to run",
                   "use a checkpoint with an MTP head, or --spec-method ngram / draft_model")
    for arm in ctx.plan.arms:  # the arms this run starts: one that cannot run fails here
        refusal = arm_refusal(replace(arm, model=model), report)
        if refusal is not None:
            found.fail(refusal.message, refusal.hint or "")
    if report.quantization:
        q = report.quantization[0]
        found.ok(f"quantization {q.method}" + (f" ({q.algo})" if q.algo else "")
                 + f", {len(q.ignore)} ignore entries")
    else:
        found.ok("not quantized")
    if report.has_trap:
        modules = report.unquantized_mtp_not_ignored
        fix = (f"tailpod inspect {model} --fix-into DIR, then serve DIR" if is_local_dir(model)
               else "download it, run `tailpod inspect DIR --fix-into NEWDIR` and serve NEWDIR")
        # Not a failure: `up` serves a patched overlay (on the pod for a Hub checkpoint) and the
        # run records the patch; the fix is for serving the checkpoint without tailpod.
        found.warn(f"{len(modules)} MTP module(s) are stored unquantized but missing from the "
                   f"quantization ignore list ({_short_list(modules)}): the engine would build "
                   "quantized layers for them and fail to load or draft garbage; tailpod serves "
                   "an overlay with the patched ignore list and records the patch in the run",
                   fix)
    if report.weight_bytes is None:
        found.warn("no safetensors weights found, so the size is unknown",
                   "check the repository holds *.safetensors")
    else:
        found.ok(f"weights {report.weight_bytes / 1e9:.2f} GB in "
                 f"{len(report.weight_files)} file(s)")
    for warning in report.warnings:
        if warning.startswith(("config.json declares", "no safetensors weights")) \
                or "ignore list" in warning:
            continue  # reported above with a fix
        found.warn(warning)
    data = {"architecture": report.architecture, "location": report.location,
            "revision": report.revision, "weight_bytes": report.weight_bytes,
            "mtp": {"present": mtp.present, "layers": mtp.layers, "naming": mtp.naming},
            "quant_method": report.quant_method, "trap": report.unquantized_mtp_not_ignored}
    return found.outcome(data)
