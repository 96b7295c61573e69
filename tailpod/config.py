"""One settings object: CLI flags > process environment > .env > defaults.

Every field knows its environment variable. Secret fields are wrapped in `Secret` the moment they
are read, so a settings object can be printed, logged or dumped without leaking a key.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import re
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dotenv.parser import parse_stream

from tailpod.agent.bootstrap.terminate import PROVIDERS as POD_PROVIDERS
from tailpod.errors import ConfigError
from tailpod.secrets import Secret


def default_home() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "tailpod"


def _meta(env: str, secret: bool = False, kind: str = "str") -> dict[str, Any]:
    return {"env": env, "secret": secret, "kind": kind}


# 30 min: several missed beats, yet cheap if the laptop died (the dead-man switch, docs/deadman.md).
DEFAULT_HEARTBEAT_TIMEOUT_S = 1800.0
FIRST_CONTACT_MODES = ("auto", "off")  # TAILPOD_FIRST_CONTACT


@dataclass(frozen=True)
class Settings:
    home: Path = field(default_factory=default_home, metadata=_meta("TAILPOD_HOME", kind="path"))
    # This home's identity in its run tags (ledger.home_id): empty = the one stored in the home.
    home_id: str = field(default="", metadata=_meta("TAILPOD_HOME_ID"))
    provider: str = field(default="local", metadata=_meta("TAILPOD_PROVIDER"))
    engine: str = field(default="vllm", metadata=_meta("TAILPOD_ENGINE"))
    model: str = field(default="", metadata=_meta("TAILPOD_MODEL"))
    served_name: str = field(default="tailpod", metadata=_meta("TAILPOD_SERVED_NAME"))
    port: int = field(default=8000, metadata=_meta("TAILPOD_PORT", kind="int"))
    image: str = field(default="", metadata=_meta("TAILPOD_IMAGE"))
    gpus: tuple[str, ...] = field(default=(), metadata=_meta("TAILPOD_GPUS", kind="list"))
    gpu_count: int = field(default=1, metadata=_meta("TAILPOD_GPU_COUNT", kind="int"))
    max_price: float | None = field(default=None, metadata=_meta("TAILPOD_MAX_PRICE", kind="float"))
    # Spot (interruptible) rental and its bid in $/h per machine (`up --spot [--bid]`): only where
    # the provider documents a spot route (provision/base.py Provider.spot_route).
    spot: bool = field(default=False, metadata=_meta("TAILPOD_SPOT", kind="bool"))
    bid: float | None = field(default=None, metadata=_meta("TAILPOD_BID", kind="float"))
    ttl_hours: float = field(default=4.0, metadata=_meta("TAILPOD_TTL_HOURS", kind="float"))
    # RunPod: `up` runs first contact (a CPU pod, under a cent) when the account has no result for
    # the image's start form; "off" (`up --no-first-contact`) rents without (pods/first_contact.py).
    first_contact: str = field(default="auto", metadata=_meta("TAILPOD_FIRST_CONTACT"))
    heartbeat_timeout_s: float = field(
        default=DEFAULT_HEARTBEAT_TIMEOUT_S, metadata=_meta("TAILPOD_HEARTBEAT_TIMEOUT", kind="float")
    )
    disk_gb: int = field(default=80, metadata=_meta("TAILPOD_DISK_GB", kind="int"))
    # The offer filters every command shares (gpus, check-requirements, matrix, up): a vast.ai
    # host's reliability score, and a CUDA floor ("12.8") on top of the image's own.
    min_reliability: float = field(
        default=0.95, metadata=_meta("TAILPOD_MIN_RELIABILITY", kind="float"))
    min_cuda: str = field(default="", metadata=_meta("TAILPOD_MIN_CUDA"))
    startup_timeout_s: float = field(
        default=600.0, metadata=_meta("TAILPOD_STARTUP_TIMEOUT", kind="float")
    )
    results_dir: Path = field(
        default=Path("results"), metadata=_meta("TAILPOD_RESULTS_DIR", kind="path")
    )
    engine_python: str = field(default="", metadata=_meta("TAILPOD_ENGINE_PYTHON"))
    # The user's own llama.cpp server for `--provider local --engine llamacpp` (a path, or a name
    # looked up on PATH).
    llama_server: str = field(default="llama-server", metadata=_meta("TAILPOD_LLAMA_SERVER"))
    ssh_key: Path | None = field(default=None, metadata=_meta("TAILPOD_SSH_KEY", kind="path"))
    # `--provider ssh`: your own box, user@host[:port] (provision/ssh_box/provider.py).
    ssh_host: str | None = field(default=None, metadata=_meta("TAILPOD_SSH_HOST"))
    # An OpenSSH client config whose HostName/Port say where to open TCP for a pod's tailnet
    # name or address (tailpod/provision/ssh/client_config.py; docs/ssh-and-tailnet.md).
    ssh_config: Path | None = field(
        default=None, metadata=_meta("TAILPOD_SSH_CONFIG", kind="path")
    )
    ssh_key_passphrase: Secret | None = field(
        default=None, metadata=_meta("TAILPOD_SSH_KEY_PASSPHRASE", True)
    )
    runpod_api_key: Secret | None = field(default=None, metadata=_meta("RUNPOD_API_KEY", True))
    vast_api_key: Secret | None = field(default=None, metadata=_meta("VAST_API_KEY", True))
    hf_token: Secret | None = field(default=None, metadata=_meta("HF_TOKEN", True))
    tailscale_api_key: Secret | None = field(
        default=None, metadata=_meta("TAILSCALE_API_KEY", True)
    )
    tailscale_auth_key: Secret | None = field(
        default=None, metadata=_meta("TAILSCALE_AUTH_KEY", True)
    )
    tailscale_tailnet: str = field(default="-", metadata=_meta("TAILSCALE_TAILNET"))
    tailscale_tags: tuple[str, ...] = field(
        default=("tag:tailpod",), metadata=_meta("TAILPOD_TAILSCALE_TAGS", kind="list")
    )
    runpod_url: str = field(default=POD_PROVIDERS["runpod"]["api_url"],
                            metadata=_meta("TAILPOD_RUNPOD_URL"))
    vast_url: str = field(default=POD_PROVIDERS["vastai"]["api_url"],
                          metadata=_meta("TAILPOD_VAST_URL"))
    tailscale_url: str = field(
        default="https://api.tailscale.com", metadata=_meta("TAILPOD_TAILSCALE_URL")
    )
    registry_url: str = field(
        default="https://registry-1.docker.io", metadata=_meta("TAILPOD_REGISTRY_URL")
    )
    registry_auth_url: str = field(
        default="https://auth.docker.io", metadata=_meta("TAILPOD_REGISTRY_AUTH_URL")
    )
    hf_url: str = field(default="https://huggingface.co", metadata=_meta("TAILPOD_HF_URL"))

    @property
    def state_dir(self) -> Path:
        return self.home

    def public_view(self) -> dict[str, Any]:
        """Settings as a dict safe to print: secrets show only whether they are set."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata["secret"]:
                out[f.name] = "set" if value else "unset"
            elif isinstance(value, Path):
                out[f.name] = str(value)
            else:
                out[f.name] = value
        return out


_DOTENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*)$", re.S)


def dotenv_line_problem(text: str) -> str:
    """What is wrong with a .env line python-dotenv refused, in words (never its value)."""
    line = text.rstrip("\n")
    m = _DOTENV_LINE.match(line)
    if m is None:
        if "=" not in line:
            return "is not KEY=VALUE (no '=')"
        return "is not KEY=VALUE (the name before '=' is not a valid variable name)"
    key, value = m.group(1), m.group(2).strip()
    if value[:1] in ("'", '"') and value[0] not in value[1:]:
        return (f"opens a quote ({value[0]}) in {key}'s value that is never closed; "
                "close it or drop the quotes")
    return f"sets {key} in a form python-dotenv does not read (stray characters after a quote?)"


def read_dotenv(path: Path) -> dict[str, str]:
    """Parse a .env file strictly: a line python-dotenv cannot parse is an error, not a warning."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc.__class__.__name__}") from None
    values: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            line = binding.original.line
            raise ConfigError(
                f"{path}: line {line} {dotenv_line_problem(binding.original.string)}",
                hint="fix or remove that line; see .env.example",
            )
        if binding.key is not None and binding.value is not None:
            values[binding.key] = binding.value
    return values


def _convert(name: str, kind: str, secret: bool, raw: Any, source: str) -> Any:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None  # an empty value in .env or the environment means "not set"
    if secret:
        if isinstance(raw, Secret):
            return raw if raw else None
        text = str(raw).strip()
        return Secret(text) if text else None
    if kind == "str":
        return str(raw)
    if kind == "path":
        return Path(str(raw)).expanduser() if str(raw) else None
    if kind == "list":
        if isinstance(raw, (list, tuple)):
            return tuple(str(x).strip() for x in raw if str(x).strip())
        return tuple(x.strip() for x in str(raw).split(",") if x.strip())
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name} from {source} must be true or false, got {raw!r}")
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        raise ConfigError(f"{name} from {source} must be a number, got {raw!r}") from None
    raise AssertionError(kind)


def check_env_file_named(env: Mapping[str, str]) -> None:
    """A missing ./.env is normal (keys may all be in the environment); a TAILPOD_ENV_FILE that
    names a file that is not there is a mistake, and reading on would run without its keys."""
    named = env.get("TAILPOD_ENV_FILE")
    if named is not None and not Path(named).exists():
        raise ConfigError(
            f"TAILPOD_ENV_FILE names {named}, which does not exist",
            hint="create it (see .env.example), point TAILPOD_ENV_FILE at your .env, "
            "or unset it to read ./.env",
        )


# The count form of a GPU name, read one way for `--gpu` and TAILPOD_GPUS: SkyPilot's `A40:2`
# (https://docs.skypilot.co/en/latest/reference/cli.html, `--gpus`).
_COUNT_FORM = re.compile(r"^(?P<name>.*\S)\s*:\s*(?P<count>\d+)$")


def split_count(value: str, what: str = "--gpu") -> tuple[str, int | None]:
    """`A40:2` -> ("A40", 2); `A40` -> ("A40", None). A count below 1 is refused, naming `what`
    (the flag or the setting the value came from)."""
    found = _COUNT_FORM.match(value.strip())
    if found is None or ":" in found.group("name"):
        if ":" in value:  # `A40:-1`, `A40::2`: no GPU name holds a colon; a count was meant
            raise ConfigError(f"{what} {value!r}: a GPU name holds no ':', and the count "
                              "after it must be a whole number of GPUs, at least 1")
        return value.strip(), None
    count = int(found.group("count"))
    if count < 1:
        raise ConfigError(f"{what} {value!r}: the count after ':' must be at least 1")
    return found.group("name").strip(), count


def gpu_flags(values: Iterable[str] | None, gpu_count: int | None, what: str = "--gpu",
              count_what: str = "--gpu-count") -> tuple[tuple[str, ...] | None, int | None]:
    """The `--gpu` values with any `:N` taken off, and the GPU count per pod they state (or
    `gpu_count` when none does). Refused (exit 2) when two counts disagree: one pod has one count."""
    if not values:
        return None, gpu_count
    names: list[str] = []
    counts: dict[int, str] = {}
    for value in values:
        name, count = split_count(value, what)
        names.append(name)
        if count is not None:
            counts.setdefault(count, value)
    if gpu_count is not None and counts and set(counts) != {gpu_count}:
        first = next(iter(counts.values()))
        raise ConfigError(f"{what} {first!r} asks for {next(iter(counts))} GPU(s) but "
                          f"{count_what} is {gpu_count}",
                          hint="give the count once: --gpu NAME:N or --gpu-count N")
    if len(counts) > 1:
        raise ConfigError(f"the {what} values ask for different counts ("
                          + ", ".join(repr(v) for v in counts.values()) + "); a pod has one",
                          hint="use one count for every --gpu (NAME:N), or --gpu-count N")
    return tuple(names), (next(iter(counts)) if counts else gpu_count)



def load_settings(
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    dotenv_path: Path | None = None,
) -> Settings:
    """Settings with the documented precedence; `overrides` are CLI flags (None = not given)."""
    env = os.environ if env is None else env
    if dotenv_path is None:
        check_env_file_named(env)
        dotenv_path = Path(env.get("TAILPOD_ENV_FILE", ".env"))
    dotenv = read_dotenv(dotenv_path)
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    kwargs: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for f in dataclasses.fields(Settings):
        meta = f.metadata
        if f.name in overrides:
            raw, source = overrides[f.name], "the command line"
        elif meta["env"] in env:
            raw, source = env[meta["env"]], f"environment variable {meta['env']}"
        elif meta["env"] in dotenv:
            raw, source = dotenv[meta["env"]], f"{dotenv_path} ({meta['env']})"
        else:
            continue
        value = _convert(f.name, meta["kind"], meta["secret"], raw, source)
        if value is not None or meta["secret"]:
            kwargs[f.name] = value
            sources[f.name] = source
    if "gpus" in kwargs and sources["gpus"] != "the command line":
        # `TAILPOD_GPUS=A40:2` means what `--gpu A40:2` means (the CLI splits its flag itself)
        count_source = sources.get("gpu_count", "the GPU count")
        if count_source == "the command line":
            count_source = "--gpu-count"
        names, count = gpu_flags(kwargs["gpus"], kwargs.get("gpu_count"), what="TAILPOD_GPUS",
                                 count_what=count_source)
        kwargs["gpus"] = names
        if count is not None and "gpu_count" not in kwargs:
            kwargs["gpu_count"], sources["gpu_count"] = count, sources["gpus"]
    settings = Settings(**kwargs)
    _SOURCES[id(settings)] = (weakref.ref(settings), sources)
    weakref.finalize(settings, _SOURCES.pop, id(settings), None)
    return settings


# Where load_settings found each value ("the command line", "environment variable X", "FILE (X)"),
# by the Settings object it made; a Settings made otherwise (dataclasses.replace) has none.
_SOURCES: dict[int, tuple[weakref.ref[Settings], dict[str, str]]] = {}


def source_of(settings: Settings, name: str) -> str | None:
    """Where `settings.<name>` came from, when load_settings made `settings` and found it."""
    entry = _SOURCES.get(id(settings))
    if entry is None or entry[0]() is not settings:
        return None
    return entry[1].get(name)


def replace_settings(settings: Settings, **changes: Any) -> Settings:
    """`dataclasses.replace(settings, **changes)` that keeps where each unchanged value came from,
    so a check of the copy names the flag or variable the user set (a bad `--bid` under a
    `:spot` matrix card was blamed on TAILPOD_BID when the copy had lost its origins)."""
    copy = dataclasses.replace(settings, **changes)
    entry = _SOURCES.get(id(settings))
    if entry is not None and entry[0]() is settings:
        kept = {k: v for k, v in entry[1].items() if k not in changes}
        _SOURCES[id(copy)] = (weakref.ref(copy), kept)
        weakref.finalize(copy, _SOURCES.pop, id(copy), None)
    return copy


# A run id names one directory directly under the results dir (`<results dir>/<run id>`), so it
# holds no separator, no `..`, no NUL and nothing a shell or a file system reads otherwise; run
# tags (ledger.py new_run_tag) and every id tailpod makes itself fit it.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
RUN_ID_RULE = ("one directory name under the results dir: letters, digits, '.', '_' and '-', "
               "not starting with '.' or '-', at most 200 characters")


def check_run_id(run_id: str, what: str = "--run-id") -> str:
    """`run_id` when it names one directory directly under the results dir; else a ConfigError
    (exit 2) naming it, raised before anything waits, rents or writes."""
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise ConfigError(f"{what} {run_id!r} is not a run id ({RUN_ID_RULE}); nothing was "
                          "written", hint="e.g. sweep-2, whose directory is <results dir>/sweep-2")
    return run_id


def run_path(results_dir: Path, run_id: str, what: str = "--run-id") -> Path:
    """The one place a run id becomes a path: `<results dir>/<run id>`, the id checked first
    (`check_run_id`), so no id reaches outside the results dir."""
    return Path(results_dir) / check_run_id(run_id, what)


# Bounds for the settings that only bite once a pod bills: `up` checks them before preflight.
MAX_TTL_HOURS = 168.0  # a week; a longer rental is a decision, not a default
MAX_GPU_COUNT = 16


# A home's identity in its run tags (TAILPOD_HOME_ID, or the one kept in the home: ledger.home_id).
HOME_ID_PATTERN = re.compile(r"^[a-z0-9]{2,12}$")


def run_settings_problems(settings: Settings) -> list[str]:
    """What is wrong with the settings `up` would rent with; [] when nothing is."""
    problems: list[str] = []

    def origin(field_name: str, env_name: str) -> str:
        found = source_of(settings, field_name)
        return f"from {found}" if found else env_name

    def positive(name: str, flag: str, value: float | None, upper: float | None = None,
                 field_name: str = "") -> None:
        if value is None:
            return
        if not math.isfinite(value) or value <= 0 or (upper is not None and value > upper):
            limit = f"at most {upper:g}" if upper is not None else "finite"
            problems.append(f"{flag} must be a positive number ({limit}), got {value!r} "
                            f"({origin(field_name, name)})")

    if settings.first_contact not in FIRST_CONTACT_MODES:
        problems.append(f"first contact must be one of {', '.join(FIRST_CONTACT_MODES)}, got "
                        f"{settings.first_contact!r} "
                        f"({origin('first_contact', 'TAILPOD_FIRST_CONTACT')})")
    if settings.home_id and not HOME_ID_PATTERN.match(settings.home_id):
        problems.append(f"TAILPOD_HOME_ID must be 2 to 12 lowercase letters or digits, got "
                        f"{settings.home_id!r} ({origin('home_id', 'TAILPOD_HOME_ID')})")
    if not 1 <= settings.port <= 65535:
        problems.append(f"--port must be 1-65535, got {settings.port} "
                        f"({origin('port', 'TAILPOD_PORT')})")
    positive("TAILPOD_MAX_PRICE", "--max-price", settings.max_price, field_name="max_price")
    if settings.ttl_hours != 0:  # 0 is "no TTL", accepted explicitly (see ttl_warnings); the
        # heartbeat timeout, which must stay positive, is then what ends a forgotten pod
        positive("TAILPOD_TTL_HOURS", "--ttl-hours", settings.ttl_hours, MAX_TTL_HOURS,
                 "ttl_hours")
    positive("TAILPOD_HEARTBEAT_TIMEOUT", "the heartbeat timeout", settings.heartbeat_timeout_s,
             field_name="heartbeat_timeout_s")
    positive("TAILPOD_STARTUP_TIMEOUT", "the startup timeout", settings.startup_timeout_s,
             field_name="startup_timeout_s")
    if not 1 <= settings.gpu_count <= MAX_GPU_COUNT:
        problems.append(f"--gpu-count must be 1-{MAX_GPU_COUNT}, got {settings.gpu_count} "
                        f"({origin('gpu_count', 'TAILPOD_GPU_COUNT')})")
    if settings.disk_gb <= 0:
        problems.append(f"the disk size must be positive, got {settings.disk_gb} "
                        f"({origin('disk_gb', 'TAILPOD_DISK_GB')})")
    positive("TAILPOD_BID", "--bid", settings.bid, field_name="bid")
    problems += spot_problems(settings)
    problems += offer_filter_problems(settings, origin)
    return problems


def spot_problems(settings: Settings) -> list[str]:
    """What makes a spot request impossible whatever the provider: a bid without --spot, a bid
    above the price cap (the cap applies to the bid). The provider's own route is checked by
    provision/providers.py `check_spot_route`."""
    problems: list[str] = []
    if settings.bid is not None and not settings.spot:
        problems.append("--bid is the spot bid: it needs --spot")
    if not settings.spot:
        return problems
    if settings.bid is not None and settings.max_price is not None \
            and settings.bid > settings.max_price + 1e-9:
        problems.append(f"the bid ${settings.bid:g}/h is above the price cap "
                        f"${settings.max_price:g}/h (the cap applies to the bid)")
    return problems


CUDA_VERSION = re.compile(r"^\d+(\.\d+)?$")  # RunPod's minCudaVersion pattern (v2 openapi)


def offer_filter_problems(settings: Settings, origin: Any = None) -> list[str]:
    """What is wrong with the offer filters (`--min-reliability`, `--min-cuda`, `--disk-gb`)."""
    def where(field_name: str) -> str:
        return f" ({origin(field_name, env_name(field_name))})" if origin else ""

    problems = []
    if not (math.isfinite(settings.min_reliability) and 0 <= settings.min_reliability <= 1):
        problems.append(f"--min-reliability must be 0-1, got {settings.min_reliability!r}"
                        + where("min_reliability"))
    if settings.min_cuda and not CUDA_VERSION.match(settings.min_cuda.strip()):
        problems.append(f"--min-cuda must be a CUDA version like 12.8, got "
                        f"{settings.min_cuda!r}" + where("min_cuda"))
    return problems


def env_name(field_name: str) -> str:
    """The environment variable a Settings field is read from (declared once, on the field)."""
    return str(Settings.__dataclass_fields__[field_name].metadata["env"])


def no_ttl(settings: Settings) -> bool:
    """`--ttl-hours 0`: the pod gets no TTL (the dead-man's heartbeat, if set, still applies)."""
    return settings.ttl_hours == 0


def ttl_deadline(ttl_hours: float, now: float) -> float | None:
    """The epoch second by which a pod rented at `now` must be gone; None: no TTL (`--ttl-hours 0`).

    The one place a TTL becomes a deadline. Whoever rents reads the clock once, puts the result in
    the pod's spec (PodSpec.ttl_at), and the ledger's ttl_expires_at and the pod's dead-man guard
    both take it from there, so they cannot disagree by the time between two clock reads."""
    if ttl_hours < 0 or not math.isfinite(ttl_hours):
        raise ConfigError(f"the TTL must be 0 (none) or a positive number of hours, got {ttl_hours}",
                          hint="set TAILPOD_TTL_HOURS, e.g. 4")
    return now + ttl_hours * 3600.0 if ttl_hours > 0 else None


def ttl_warnings(settings: Settings) -> list[str]:
    """What `up` says before renting with the settings given; [] when nothing needs saying."""
    if not no_ttl(settings):
        return []
    beat = settings.heartbeat_timeout_s
    return [f"--ttl-hours 0: the pod has NO TTL (accepted explicitly); only the dead-man's "
            f"heartbeat timeout ({beat:g} s without word from this laptop) or `tailpod down` "
            "ends it"]


def check_run_settings(settings: Settings) -> None:
    """ConfigError (exit 2) naming every bad value, before anything is checked or rented."""
    problems = run_settings_problems(settings)
    if problems:
        raise ConfigError("; ".join(problems) + "; nothing was rented",
                          hint="fix the flag or the environment variable named")
