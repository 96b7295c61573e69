"""What a checkpoint holds, read without downloading its weights.

From a local directory, or from the Hugging Face Hub through `huggingface_hub` (config.json, the
safetensors index, and each shard's safetensors *header* via HTTP range requests): architecture,
whether an MTP head is present and how it is named, its layer count, weight bytes, the quantization
method with its ignore/exclude list, and the known trap (vllm-project/vllm PRs #38832 and #32101; docs/engines.md):
MTP modules stored unquantized but missing from the ignore list, which makes engines build
quantized parameters for them and then fail or load garbage. `fix_mtp_ignore_list` writes a patched
config beside symlinked weights so a bootstrap can work around the trap and record that it did.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tailpod.agent.bootstrap.overlay import build_overlay
from tailpod.config import Settings
from tailpod.engines.adapters import get_adapter
from tailpod.engines.base import EngineConfig
from tailpod.errors import AuthError, ConfigError, ProviderError

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
HF_QUANT_CONFIG = "hf_quant_config.json"
MTP_FILE = "mtp.safetensors"
PATCH_RECORD = "tailpod-mtp-ignore-patch.json"
_MAX_HEADER = 100 * 1024 * 1024  # safetensors headers are JSON; anything bigger is not one
_UNQUANTIZED_DTYPES = {"BF16", "F16", "F32", "F64"}
# tensors that sit beside a quantized weight (FP8 block scales, NVFP4, compressed-tensors, GPTQ/AWQ)
_QUANT_COMPANIONS = {
    "weight_scale",
    "weight_scale_inv",
    "weight_scale_2",
    "input_scale",
    "weight_packed",
    "weight_shape",
    "weight_zero_point",
    "weight_global_scale",
    "qweight",
    "qzeros",
    "scales",
    "g_idx",
}
# where each format keeps its "leave these unquantized" list, in the order engines read them
_IGNORE_KEYS = {
    "fp8": ("ignored_layers", "modules_to_not_convert"),
    "compressed-tensors": ("ignore",),
    "modelopt": ("ignore", "exclude_modules"),
    "quark": ("exclude",),
}
_GENERIC_IGNORE_KEYS = (
    "modules_to_not_convert",
    "ignore",
    "exclude_modules",
    "ignored_layers",
    "exclude",
)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass(frozen=True)
class TensorMeta:
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str


@dataclass
class QuantConfig:
    """One quantization config the checkpoint carries (config.json and/or hf_quant_config.json)."""

    source: str  # file it came from
    method: str
    algo: str | None
    ignore_key: str | None  # the key holding the list; None when the config has none
    ignore: list[str]


@dataclass
class MtpInfo:
    present: bool = False
    naming: str | None = None  # deepseek | glm | qwen | mimo | separate_file
    prefixes: list[str] = field(default_factory=list)  # module roots, e.g. ["model.layers.61"]
    layers: int = 0
    declared_layers: int | None = None  # what config.json says
    tensors: int = 0
    nbytes: int = 0
    dtypes: list[str] = field(default_factory=list)
    file: str | None = None  # set when the head lives in its own mtp.safetensors


@dataclass
class CheckpointReport:
    source: str
    location: str  # local | hub
    revision: str | None
    architecture: str | None
    model_type: str | None
    num_hidden_layers: int | None
    weight_files: list[str]
    weight_bytes: int | None
    tensor_count: int
    mtp: MtpInfo
    quantization: list[QuantConfig]
    unquantized_mtp_not_ignored: list[str]  # the ignore-list trap: module names
    warnings: list[str]

    @property
    def quant_method(self) -> str | None:
        return self.quantization[0].method if self.quantization else None

    @property
    def has_trap(self) -> bool:
        return bool(self.unquantized_mtp_not_ignored)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["quant_method"] = self.quant_method
        return data


class CheckpointSource(Protocol):
    label: str
    location: str
    revision: str | None

    def files(self) -> list[str]: ...

    def read_json(self, name: str) -> dict[str, Any] | None: ...

    def header(self, name: str) -> dict[str, TensorMeta]: ...


# ---------------------------------------------------------------------------------------------
# Sources


def _tensors_from_header(header: Any, filename: str) -> dict[str, TensorMeta]:
    if not isinstance(header, dict):
        raise ConfigError(f"{filename}: safetensors header is not a JSON object")
    out: dict[str, TensorMeta] = {}
    for name, meta in header.items():
        if name == "__metadata__" or not isinstance(meta, dict):
            continue
        try:
            start, end = meta["data_offsets"]
            shape = tuple(int(x) for x in meta.get("shape", ()))
            out[name] = TensorMeta(str(meta["dtype"]), shape, int(end) - int(start), filename)
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{filename}: malformed safetensors entry for {name!r}") from None
    return out


class LocalSource:
    location = "local"
    revision: str | None = None

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = str(path)

    def files(self) -> list[str]:
        return sorted(p.name for p in self.path.iterdir())

    def read_json(self, name: str) -> dict[str, Any] | None:
        target = self.path / name
        if not target.is_file():
            return None
        try:
            data = json.loads(target.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read {target}: {exc.__class__.__name__}") from None
        return data if isinstance(data, dict) else None

    def header(self, name: str) -> dict[str, TensorMeta]:
        return read_local_header(self.path / name)


def read_local_header(path: Path) -> dict[str, TensorMeta]:
    """Tensor metadata from a safetensors file's header; the tensor data is never read."""
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ConfigError(f"{path} is too short to be a safetensors file")
            (size,) = struct.unpack("<Q", prefix)
            if size > _MAX_HEADER:
                raise ConfigError(
                    f"{path}: safetensors header claims {size} bytes; not safetensors"
                )
            raw = handle.read(size)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.__class__.__name__}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(f"{path}: safetensors header is not JSON") from None
    return _tensors_from_header(header, path.name)


class HubSource:
    """A Hub (or Hub-compatible) repository read through huggingface_hub, headers only."""

    location = "hub"

    def __init__(
        self,
        repo_id: str,
        endpoint: str,
        token: str | None,
        revision: str | None = None,
        timeout: float = 20.0,
    ) -> None:
        # huggingface_hub stays lazy: a heavy import only a Hub read needs, not `tailpod --help`.
        from huggingface_hub import HfApi
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
        self.label = repo_id
        self.repo_id = repo_id
        self.endpoint = endpoint.rstrip("/")
        # token=False: only Settings.hf_token counts, never a token cached on this machine.
        self._token: str | bool = token or False
        self.api = HfApi(endpoint=self.endpoint, token=self._token)
        self.timeout = timeout
        self._cache = tempfile.TemporaryDirectory(prefix="tailpod-hf-")
        with self._errors():
            info = self.api.model_info(repo_id, revision=revision, timeout=timeout)
        self.revision = info.sha or revision
        self._files = sorted(s.rfilename for s in (info.siblings or []))

    def close(self) -> None:
        self._cache.cleanup()

    def files(self) -> list[str]:
        return list(self._files)

    def read_json(self, name: str) -> dict[str, Any] | None:
        if name not in self._files:
            return None
        with self._errors(name):
            local = self.api.hf_hub_download(
                self.repo_id, name, revision=self.revision, cache_dir=self._cache.name
            )
        try:
            data = json.loads(Path(local).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{self.repo_id}/{name}: {exc.__class__.__name__}") from None
        return data if isinstance(data, dict) else None

    def header(self, name: str) -> dict[str, TensorMeta]:
        with self._errors(name):
            meta = self.api.parse_safetensors_file_metadata(
                self.repo_id, name, revision=self.revision, timeout=self.timeout
            )
        out: dict[str, TensorMeta] = {}
        for tensor, info in meta.tensors.items():
            start, end = info.data_offsets
            out[tensor] = TensorMeta(str(info.dtype), tuple(info.shape), int(end - start), name)
        return out

    @contextlib.contextmanager
    def _errors(self, name: str | None = None) -> Iterator[None]:
        """huggingface_hub errors → one clear tailpod error; never echoes the token."""
        # lazy: only a Hub read gets here (huggingface_hub is heavy; see __init__).
        from huggingface_hub import errors as hf_errors

        what = f"{self.repo_id}/{name}" if name else self.repo_id
        where = self.endpoint
        try:
            yield
        except hf_errors.GatedRepoError:
            problem = "the Hugging Face token was refused" if self._token else "HF_TOKEN is not set"
            raise AuthError(
                f"{self.repo_id} on {where} is gated and {problem}",
                hint="set HF_TOKEN to a token whose account has accepted the model's terms",
            ) from None
        except hf_errors.RepositoryNotFoundError:
            raise ConfigError(
                f"{self.repo_id} was not found on {where} (or it is private to another account)",
                hint="check the repo id, or set HF_TOKEN for a private repository",
            ) from None
        except hf_errors.RevisionNotFoundError:
            raise ConfigError(f"revision not found for {self.repo_id} on {where}") from None
        except hf_errors.EntryNotFoundError:
            raise ConfigError(f"{what} is missing on {where}") from None
        except hf_errors.OfflineModeIsEnabled:
            raise ConfigError(
                "HF_HUB_OFFLINE is set, so the Hub cannot be asked",
                hint="unset HF_HUB_OFFLINE or inspect a local directory",
            ) from None
        except hf_errors.SafetensorsParsingError:
            raise ConfigError(f"{what}: safetensors header could not be parsed") from None
        except hf_errors.HfHubHTTPError as exc:
            status = getattr(getattr(exc, "response", None), "status_code", None)
            if status in (401, 403):
                raise AuthError(
                    f"{where} refused access to {what} (HTTP {status})",
                    hint="check HF_TOKEN",
                ) from None
            raise ProviderError(f"{where} failed for {what} (HTTP {status})") from None
        except (OSError, ConnectionError) as exc:
            raise ProviderError(
                f"cannot reach {where} for {what} ({exc.__class__.__name__})",
                hint="check the network or TAILPOD_HF_URL",
            ) from None
        except Exception as exc:
            # httpx/requests transport errors do not share a base class across hub versions
            if "Connect" in type(exc).__name__ or "Timeout" in type(exc).__name__:
                raise ProviderError(
                    f"cannot reach {where} for {what} ({exc.__class__.__name__})",
                    hint="check the network or TAILPOD_HF_URL",
                ) from None
            raise


# ---------------------------------------------------------------------------------------------
# Analysis


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _nested(config: dict[str, Any], key: str) -> Any:
    """A key of config.json or of its text_config (multimodal wrappers like Qwen3.5)."""
    if key in config:
        return config[key]
    text = config.get("text_config")
    return text.get(key) if isinstance(text, dict) else None


def _quant_configs(config: dict[str, Any], hf_quant: dict[str, Any] | None) -> list[QuantConfig]:
    found: list[QuantConfig] = []
    raw = config.get("quantization_config")
    if isinstance(raw, dict):
        method = str(raw.get("quant_method") or raw.get("quant_algo") or "unknown").lower()
        keys = _IGNORE_KEYS.get(method, _GENERIC_IGNORE_KEYS)
        key = next((k for k in keys if isinstance(raw.get(k), list)), None)
        algo = raw.get("quant_algo") or raw.get("fmt") or raw.get("format")
        ignore = [str(x) for x in raw.get(key, [])] if key else []
        found.append(QuantConfig(CONFIG, method, str(algo) if algo else None, key, ignore))
    if isinstance(hf_quant, dict) and isinstance(hf_quant.get("quantization"), dict):
        quant = hf_quant["quantization"]
        key = next(
            (k for k in ("exclude_modules", "ignore") if isinstance(quant.get(k), list)), None
        )
        ignore = [str(x) for x in quant.get(key, [])] if key else []
        algo = quant.get("quant_algo")
        found.append(
            QuantConfig(HF_QUANT_CONFIG, "modelopt", str(algo) if algo else None, key, ignore)
        )
    return found


def pattern_covers(pattern: str, module: str) -> bool:
    """Whether an ignore entry leaves `module` unquantized.

    `re:` entries are regexes matched from the start (compressed-tensors); entries with wildcards
    are fnmatch patterns, `foo*` also covering `foo` itself (ModelOpt); plain entries cover the
    module itself and everything under it.
    """
    if pattern.startswith("re:"):
        try:
            return re.match(pattern[3:], module) is not None
        except re.error:
            return False
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(module, pattern) or (
            pattern.endswith("*") and module == pattern[:-1].rstrip(".")
        )
    return module == pattern or module.startswith(pattern + ".")


def _mtp_layout(
    names: list[str], files: dict[str, str], num_layers: int | None, architecture: str | None
) -> tuple[str | None, dict[str, str]]:
    """(naming, tensor -> module root) for every MTP tensor."""
    roots: dict[str, str] = {}
    naming: str | None = None
    for name in names:
        if name.startswith("mtp."):
            layer = re.match(r"mtp\.layers\.(\d+)\.", name)
            roots[name] = f"mtp.layers.{layer.group(1)}" if layer else "mtp"
            naming = naming or "qwen"
            continue
        mimo = re.match(r"model\.mtp_layers\.(\d+)\.", name)
        if mimo:
            roots[name] = f"model.mtp_layers.{mimo.group(1)}"
            naming = naming or "mimo"
            continue
        layer = re.match(r"(model\.(?:language_model\.)?layers)\.(\d+)\.", name)
        if layer and num_layers is not None and int(layer.group(2)) >= num_layers:
            roots[name] = f"{layer.group(1)}.{layer.group(2)}"
            naming = naming or ("glm" if (architecture or "").startswith("Glm") else "deepseek")
    for name, file in files.items():
        if file == MTP_FILE and name not in roots:
            roots[name] = name.split(".")[0]
            naming = naming or "separate_file"
    return naming, roots


def _module_of(tensor: str) -> tuple[str, str]:
    module, _, leaf = tensor.rpartition(".")
    return module, leaf


def _unquantized_mtp_modules(
    mtp_tensors: dict[str, TensorMeta], tensors: dict[str, TensorMeta]
) -> list[str]:
    """MTP linear modules stored in a float dtype with no quantization companions beside them."""
    modules: dict[str, set[str]] = {}
    for name in mtp_tensors:
        module, leaf = _module_of(name)
        modules.setdefault(module, set()).add(leaf)
    out = []
    for module, leaves in sorted(modules.items()):
        weight = tensors.get(f"{module}.weight")
        last = module.rsplit(".", 1)[-1]
        if weight is None or len(weight.shape) < 2 or "norm" in last or last == "embed_tokens":
            continue  # norms, embeddings and biases are never quantized
        if leaves & _QUANT_COMPANIONS or weight.dtype not in _UNQUANTIZED_DTYPES:
            continue
        out.append(module)
    return out


def analyse(source: CheckpointSource) -> CheckpointReport:
    """Build the report from any source (local directory or Hub repository)."""
    config = source.read_json(CONFIG)
    if config is None:
        raise ConfigError(f"{source.label} is not a checkpoint (no {CONFIG})")
    files = source.files()
    warnings: list[str] = []
    architectures = config.get("architectures")
    architecture = architectures[0] if isinstance(architectures, list) and architectures else None
    model_type = config.get("model_type")
    num_layers = _int_or_none(_nested(config, "num_hidden_layers"))
    declared = _int_or_none(_nested(config, "num_nextn_predict_layers"))
    if declared is None:
        declared = _int_or_none(_nested(config, "mtp_num_hidden_layers"))

    index = source.read_json(INDEX) if INDEX in files else None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    shard_names = sorted({f for f in files if f.endswith(".safetensors")})
    if isinstance(weight_map, dict):
        shard_names = sorted(set(shard_names) | {str(v) for v in weight_map.values()})
    tensors: dict[str, TensorMeta] = {}
    for shard in shard_names:
        if shard not in files:
            warnings.append(f"the index names {shard}, which the checkpoint does not have")
            continue
        tensors.update(source.header(shard))
    if not shard_names:
        warnings.append("no safetensors weights found (weights, MTP and trap checks need them)")

    naming, roots = _mtp_layout(
        list(tensors), {n: t.file for n, t in tensors.items()}, num_layers, architecture
    )
    mtp_tensors = {name: tensors[name] for name in roots}
    mtp = MtpInfo(
        present=bool(mtp_tensors),
        naming=naming,
        prefixes=sorted({_top_root(r) for r in roots.values()}),
        layers=_count_layers(roots),
        declared_layers=declared,
        tensors=len(mtp_tensors),
        nbytes=sum(t.nbytes for t in mtp_tensors.values()),
        dtypes=sorted({t.dtype for t in mtp_tensors.values()}),
        file=MTP_FILE if any(t.file == MTP_FILE for t in mtp_tensors.values()) else None,
    )
    if declared and not mtp.present and tensors:
        warnings.append(
            f"config.json declares {declared} MTP layer(s) but no MTP tensors were found; engines "
            "either refuse the draft or load uninitialised weights (acceptance near zero)"
        )
    if num_layers is None and not mtp.present:
        warnings.append(
            "num_hidden_layers is missing, so DeepSeek/GLM-style MTP layers cannot be told"
        )

    quant = _quant_configs(
        config, source.read_json(HF_QUANT_CONFIG) if HF_QUANT_CONFIG in files else None
    )
    trap: list[str] = []
    if quant and mtp.present:
        unquantized = _unquantized_mtp_modules(mtp_tensors, tensors)
        for qc in quant:
            for module in unquantized:
                if module not in trap and not any(pattern_covers(p, module) for p in qc.ignore):
                    trap.append(module)
        if trap:
            warnings.append(
                f"{len(trap)} MTP module(s) are stored unquantized but are not in the quantization "
                "ignore list; engines will build quantized layers for them and fail to load or "
                "draft garbage (docs/engines.md). fix_mtp_ignore_list() writes a patched config."
            )
    return CheckpointReport(
        source=source.label,
        location=source.location,
        revision=source.revision,
        architecture=architecture,
        model_type=str(model_type) if model_type else None,
        num_hidden_layers=num_layers,
        weight_files=shard_names,
        weight_bytes=sum(t.nbytes for t in tensors.values()) if tensors else None,
        tensor_count=len(tensors),
        mtp=mtp,
        quantization=quant,
        unquantized_mtp_not_ignored=trap,
        warnings=warnings,
    )


def _top_root(root: str) -> str:
    """`mtp.layers.0` → `mtp`; DeepSeek/GLM/MiMo roots are already one layer each."""
    return "mtp" if root.startswith("mtp") else root


def _count_layers(roots: dict[str, str]) -> int:
    layered = {r for r in roots.values() if re.search(r"\.\d+$", r)}
    if layered:
        return len(layered)
    return 1 if roots else 0


def _looks_like_path(model: str) -> bool:
    return (
        model.startswith(("/", "./", "../", "~")) or os.sep in model and not _REPO_ID.match(model)
    )


def inspect_checkpoint(
    model: str, settings: Settings | None = None, *, revision: str | None = None
) -> CheckpointReport:
    """Inspect a local checkpoint directory, or a Hub repo id (`org/name`) without weights."""
    text = model.strip()
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ConfigError(f"{path} is a file, not a checkpoint directory")
        return analyse(LocalSource(path))
    if not text or _looks_like_path(text) or not _REPO_ID.match(text):
        raise ConfigError(
            f"{text or '(empty)'} is neither a local directory nor a Hub repo id (org/name)"
        )
    settings = settings or Settings()
    token = settings.hf_token.reveal() if settings.hf_token else None
    hub = HubSource(text, settings.hf_url, token, revision=revision)
    try:
        return analyse(hub)
    finally:
        hub.close()


# ---------------------------------------------------------------------------------------------
# The workaround


def _entries_to_add(qc: QuantConfig, modules: list[str], roots: list[str]) -> list[str]:
    missing = [m for m in modules if not any(pattern_covers(p, m) for p in qc.ignore)]
    if not missing:
        return []
    added = list(missing)
    # Pattern-capable formats also get the root, which covers the fused module names engines
    # build (qkv_proj, gate_up_proj) that a list of checkpoint names cannot.
    for root in roots:
        if qc.method == "modelopt":
            added.append(f"{root}*")
        elif qc.method == "compressed-tensors":
            added.append(f"re:^{re.escape(root)}\\.")
    return [a for a in added if a not in qc.ignore]


def _patch_quant(block: dict[str, Any], qc: QuantConfig, additions: list[str]) -> None:
    key = qc.ignore_key or (_IGNORE_KEYS.get(qc.method, _GENERIC_IGNORE_KEYS)[0])
    current = block.get(key)
    block[key] = (list(current) if isinstance(current, list) else []) + additions


def mtp_ignore_overlay(source: CheckpointSource, report: CheckpointReport) -> dict[str, Any] | None:
    """What the overlay of a trapped checkpoint changes: the JSON files holding an ignore list,
    patched to cover the unquantized MTP modules, and the record of what was added and why.
    None when there is no trap. Works on a Hub repository without its weights, so the laptop
    computes the patch and the pod only writes it (tailpod/agent/bootstrap/overlay.py)."""
    if not report.has_trap:
        return None
    roots = report.mtp.prefixes
    patched: dict[str, dict[str, Any]] = {}
    added_all: list[str] = []
    for qc in report.quantization:
        additions = _entries_to_add(qc, report.unquantized_mtp_not_ignored, roots)
        if not additions:
            continue
        document = patched.get(qc.source) or source.read_json(qc.source) or {}
        block = (
            document.setdefault("quantization_config", {})
            if qc.source == CONFIG
            else document.setdefault("quantization", {})
        )
        _patch_quant(block, qc, additions)
        patched[qc.source] = document
        added_all += [a for a in additions if a not in added_all]
    if not added_all:
        return None
    return {
        "files": patched,
        "record": {
            "added": added_all,
            "modules": report.unquantized_mtp_not_ignored,
            "reason": "MTP modules stored unquantized but absent from the quantization ignore list",
        },
    }


def fix_mtp_ignore_list(ckpt_dir: str | Path, out_dir: str | Path) -> list[str]:
    """Write a copy of `ckpt_dir` whose quantization ignore lists cover the unquantized MTP modules.

    The weights and every other file are symlinked; only the JSON files holding an ignore list
    are rewritten, and `tailpod-mtp-ignore-patch.json` records what was added. Returns the added
    entries; when there is nothing to add, returns [] and writes nothing. The writer is the one the
    pod agent uses for a Hub checkpoint (tailpod/agent/bootstrap/overlay.py).
    """
    source = Path(ckpt_dir).expanduser().resolve()
    target = Path(out_dir).expanduser()
    if not source.is_dir():
        raise ConfigError(f"{source} is not a checkpoint directory")
    local = LocalSource(source)
    patch = mtp_ignore_overlay(local, analyse(local))
    if patch is None:
        return []
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"{target} exists and is not empty", hint="pass a new directory")
    record = build_overlay({"dir": str(target), "source": str(source), **patch})
    return list(record["added"])


def hub_overlay_patch(model: str, settings: Settings) -> dict[str, Any] | None:
    """For a Hub checkpoint with the trap: the overlay patch (`mtp_ignore_overlay`) with the Hub id
    and the exact revision inspected, for the pod to build (tailpod/agent/bootstrap/overlay.py). None for a
    clean checkpoint, or a model that is not a Hub id (a path on the pod cannot be read here)."""
    text = model.strip()
    if Path(text).expanduser().exists() or _looks_like_path(text) or not _REPO_ID.match(text):
        return None
    token = settings.hf_token.reveal() if settings.hf_token else None
    hub = HubSource(text, settings.hf_url, token)
    try:
        patch = mtp_ignore_overlay(hub, analyse(hub))
    finally:
        hub.close()
    if patch is None:
        return None
    return {"source": text, "revision": hub.revision, **patch}


# ---------------------------------------------------------------------------------------------
# Whether an arm can run: the one answer `up`, `benchmark`, `matrix`, `--lanes`, the arm switch
# and check-requirements share (docs/engines.md#can-this-arm-run)

# Methods that draft from the target checkpoint's own MTP head: vLLM's `method: "mtp"` (vllm.py
# speculative_config) and SGLang's NEXTN (sglang.py _ALGORITHMS). llama.cpp reads its GGUF's
# metadata instead, which tailpod does not inspect.
MTP_HEAD_METHODS = frozenset({"mtp"})


def arm_needs_checkpoint(cfg: EngineConfig) -> bool:
    """Whether `cfg`'s arm can only be judged by reading the checkpoint (its MTP head)."""
    return (not cfg.spec.plain and (cfg.spec.method or "mtp") in MTP_HEAD_METHODS
            and cfg.engine != "llamacpp")


def arm_refusal(cfg: EngineConfig, report: CheckpointReport | None) -> ConfigError | None:
    """Why `cfg`'s arm cannot run on this checkpoint with this engine and version, naming the arm
    and the arm that would; None when nothing known stops it. `report` None: the checkpoint was
    not read (plain and n-gram arms need nothing from it; llama.cpp serves a GGUF file)."""
    label = cfg.spec.label()
    if report is not None and arm_needs_checkpoint(cfg) and not report.mtp.present:
        why = (f"config.json declares {report.mtp.declared_layers} MTP layer(s) but the weights "
               "have none" if report.mtp.declared_layers and report.tensor_count
               else "the checkpoint has no MTP head")
        return ConfigError(
            f"arm {label} cannot run on {cfg.model}: {why}, so MTP speculation has no draft",
            hint=f"use --spec-method ngram (arm ngram-k{cfg.spec.k}), --spec-method draft_model "
                 "--draft-model DIR, or a checkpoint with an MTP head")
    try:  # the engine and its version: the launch plan is built exactly as on the pod
        get_adapter(cfg.engine).launch_plan(cfg)
    except ConfigError as exc:
        return ConfigError(f"arm {label} cannot run on {cfg.engine}: {exc.message}",
                           hint=exc.hint or f"use --spec-method ngram (arm ngram-k{cfg.spec.k}) "
                                            "or --spec-k 0 (plain)")
    return None


def check_arms(cfgs: list[EngineConfig], settings: Settings | None = None) -> None:
    """Refuse (ConfigError, exit 2) the first arm that cannot run, before anything rents or
    relaunches. The checkpoint is read (headers only) once per model, and only for an arm that
    needs it; a checkpoint that cannot be read raises its own error (nothing is assumed)."""
    reports: dict[str, CheckpointReport] = {}
    for cfg in cfgs:
        report = None
        if arm_needs_checkpoint(cfg):
            if cfg.model not in reports:
                reports[cfg.model] = inspect_checkpoint(cfg.model, settings)
            report = reports[cfg.model]
        refusal = arm_refusal(cfg, report)
        if refusal is not None:
            raise refusal
