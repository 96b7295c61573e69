"""Help that reads at 80 columns, applied once to the assembled command tree.

Every verb module declares its options plainly; this module gives them what a reader of
`--help` needs and typer does not do by itself:

- a metavar that says what to type (`TAG`, `K,K,…`, `USD/h`) instead of a Python type
  (`<str>`, `<list[str]>`), and none at all on flags that take no value;
- option groups (rich help panels) in every command with more than ten options, so that no
  panel's first column is as wide as its longest option;
- command docstrings reflowed: a single newline inside a paragraph is a space, as in prose.

It runs from `TailpodGroup.__init__` (main.py), i.e. each time typer builds the click tree, so
CliRunner invocations in tests see exactly what a user sees.
"""

from __future__ import annotations

import inspect
from typing import Any

# Metavars by parameter name (the Python name of the typer parameter). A name whose meaning
# differs by type (spec_k: one int on `up`, a list on `benchmark`) is keyed "name:type".
METAVARS: dict[str, str] = {
    "run_tag": "TAG",
    "runs": "RUN",
    "run": "RUN",
    "run_id": "RUN",
    "relaunch": "TAG",
    "file": "FILE",
    "out_dir": "DIR",
    "out": "PATH",
    "log": "FILE",
    "prompts": "FILE",
    "workdir": "DIR",
    "env_file": "FILE",
    "fix_into": "DIR",
    "provider": "PROVIDER",
    "engine": "ENGINE",
    "model": "MODEL",
    "reference": "MODEL",
    "candidate": "MODEL",
    "draft_model": "MODEL",
    "image": "REPO:TAG",
    "gpu": "GPU",
    "card": "GPU[xN]",
    "spec_k:int": "K",
    "spec_k:str": "K,K,…",
    "concurrency:int": "N",
    "concurrency:str": "N,N,…",
    "request_rate": "R,R,…",
    "prompt_classes": "CLASS,…",
    "slo": "KEY=MS,…",
    "slo_percentile": "PCT",
    "max_price": "USD/h",
    "pod_usd_hr": "USD/h",
    "serverless_usd_hr": "USD/h",
    "purchase_usd": "USD",
    "budget": "USD",
    "balance": "USD",
    "usd_per_kwh": "USD/kWh",
    "power_w": "WATTS",
    "idle_power_w": "WATTS",
    "hours": "HOURS",
    "ttl_hours": "HOURS",
    "years": "YEARS",
    "setup_minutes": "MIN",
    "restart_minutes": "MIN",
    "cell_minutes": "MIN",
    "timeout": "SECONDS",
    "wait": "SECONDS",
    "cold_start_s": "SECONDS",
    "idle_timeout_s": "SECONDS",
    "start_delay": "SECONDS",
    "max_age": "SECONDS",
    "port": "PORT",
    "runpod_port": "PORT",
    "vast_port": "PORT",
    "admin_port": "PORT",
    "host": "HOST",
    "hf_url": "URL",
    "reference_url": "URL",
    "candidate_url": "URL",
    "runpod_key": "KEY",
    "vast_key": "KEY",
    "revision": "REV",
    "format": "FORMAT",
    "table": "TABLE",
    "kind": "KIND",
    "seed": "SEED",
    "arrival_seed": "SEED",
    "top_k": "K",
    "max_k": "K",
    "resale_fraction": "FRACTION",
    "utilization": "FRACTION",
    "tok_s": "TOK/S",
    "knee_gain": "FRACTION",
    "knee_latency": "FRACTION",
    "burstiness": "SHAPE",
    "engine_python": "PYTHON",
    "llama_server": "PATH",
    "context_length": "TOKENS",
    "max_tokens": "TOKENS",
    "arm": "ARM",
    "lanes": "spec:K,plain",
    "decision": "FILE",
    "deploy": "FILE",
    "lane_kv_gib": "GiB",
    "lane_mem_fraction": "FRACTION",
    "command": "COMMAND",
}

# Option groups per command path, panel title -> parameter names, in display order. Options
# a command has and no group names stay in the first panel, "Options".
PANELS: dict[str, dict[str, list[str]]] = {
    "up": {
        "Pod": ["provider", "gpu", "gpu_count", "max_price", "spot", "bid", "min_reliability",
                "min_cuda", "disk_gb", "image", "ttl_hours", "tailnet", "allow_unpinned",
                "allow_nonephemeral", "keep_on_failure", "first_contact"],
        "Engine": ["engine", "model", "port", "context_length", "max_running_requests",
                   "enforce_eager", "llama_server", "split_mode"],
        "Speculation": ["spec_k", "spec_method", "draft_model", "relaunch"],
        "Lanes (spec and plain behind one endpoint)": ["lanes", "admission_limit", "decision",
                                                        "lane_kv_gib", "lane_mem_fraction"],
    },
    "benchmark": {
        "Arms": ["spec_k", "spec_method", "draft_model", "extend_k", "max_k", "serve_tax",
                 "deploy"],
        "Cells": ["concurrency", "reps", "max_tokens", "requests_per_cell", "prompt_classes",
                  "cache", "interleave_arms"],
        "Open loop": ["request_rate", "arrival", "burstiness", "arrival_seed", "slo",
                      "slo_percentile"],
    },
    "matrix": {
        "Cards and money": ["card", "budget", "parallel", "max_price", "spot", "bid",
                            "setup_minutes",
                            "restart_minutes", "cell_minutes", "dry_run", "tailnet",
                            "allow_unpinned"],
        "Engine and arms": ["model", "engine", "image", "spec_k", "spec_method", "draft_model",
                            "context_length", "max_running_requests"],
        "Cells": ["concurrency", "reps", "max_tokens", "requests_per_cell", "prompt_classes"],
    },
    "check-requirements": {
        "What would be rented": ["provider", "model", "gpu", "gpu_count", "image", "max_price",
                                 "min_reliability", "min_cuda", "disk_gb", "hours",
                                 "context_length"],
        "Policy": ["allow_unpinned", "allow_nonephemeral", "live"],
    },
    "gpus": {
        "Which offers": ["provider", "gpu", "gpu_count", "max_price", "available"],
        "Filters (the ones `up` rents with)": ["min_reliability", "min_cuda", "disk_gb",
                                               "image"],
    },
    "cost": {
        "Rented": ["log", "pod_usd_hr", "serverless_usd_hr", "cold_start_s", "idle_timeout_s",
                   "run", "arm", "concurrency", "tok_s"],
        "Owned (--own)": ["own", "purchase_usd", "resale_fraction", "years", "power_w",
                          "idle_power_w", "usd_per_kwh", "utilization"],
        "Spot (--matrix)": ["matrix"],
    },
    "eval kl": {
        "Models": ["reference", "candidate", "reference_url", "candidate_url", "engine",
                   "context_length", "port"],
        "Pod": ["run_tag", "provider", "restore", "keep"],
        "Measurement": ["top_k", "max_tokens", "prompts", "prompt_classes", "run_id"],
    },
    "sandbox serve": {
        "Listen": ["host", "runpod_port", "vast_port", "admin_port"],
        "Emulated accounts": ["runpod_key", "vast_key", "balance", "start_delay",
                              "graphql_retired"],
        "Pods": ["workdir", "no_run", "sshd", "no_stand_ins", "engine_python", "env_file"],
    },
}

PANEL_THRESHOLD = 10  # a command with more options than this gets groups


def reflow(text: str | None) -> str | None:
    """Paragraphs of a docstring as single lines (a `\\b` paragraph is kept verbatim)."""
    if not text:
        return text
    out = []
    for para in inspect.cleandoc(text).split("\n\n"):
        if para.startswith("\b") or any(
            line.lstrip().startswith(("- ", "* ", "|")) for line in para.splitlines()
        ):
            out.append(para)
        else:
            out.append(" ".join(line.strip() for line in para.splitlines()))
    return "\n\n".join(out)


# click's public type names, as the Python annotation they come from.
_CLICK_TYPES = {"integer": "int", "float": "float", "text": "str", "path": "Path",
                "boolean": "bool"}


def _type_name(param: Any) -> str:
    """The annotation's name (`int`, `list[str]`): from `bare_type()` where the parameter has it
    (typer 0.2x's own parameter classes), else from click's public `type`, `multiple` and
    `nargs` (typer releases built on click's classes)."""
    bare = getattr(param, "bare_type", None)
    if callable(bare):
        try:
            return str(bare()).replace("typing.", "")
        except Exception:  # noqa: BLE001 (a parameter typer did not make)
            return ""
    kind = getattr(getattr(param, "type", None), "name", "") or ""
    base = _CLICK_TYPES.get(kind, kind)
    if getattr(param, "multiple", False) or getattr(param, "nargs", 1) == -1:
        return f"list[{base}]"
    return base


def metavar_for(param: Any) -> str | None:
    """What to type after the option (None: leave the parameter's own)."""
    if getattr(param, "is_flag", False):
        return ""  # a flag takes no value
    name = param.name or ""
    tname = _type_name(param)
    base = tname[5:-1] if tname.startswith("list[") else tname
    for key in (f"{name}:{base}", name):
        if key in METAVARS:
            return METAVARS[key]
    if base == "int":
        return "N"
    if base == "float":
        return "X"
    if base == "Path":
        return "PATH"
    return name.rsplit("_", 1)[-1].upper() or None


def _plain_usage_name(param: Any) -> None:
    """`RUN...` and `[TAG]` in the usage line (typer writes a required one as `{RUN}...`)."""
    def usage_name() -> str:
        name = str(param.metavar or param.name).upper()
        if param.nargs != 1:
            name += "..."
        return name if param.required else f"[{name}]"

    # click's public per-parameter hook for the usage line (typer's own spelling differs by
    # release: `{RUN}...` in some, the bare name in others).
    param.get_usage_pieces = lambda _ctx: [usage_name()]


def polish_command(cmd: Any, path: str) -> None:
    cmd.help = reflow(cmd.help)
    params = [p for p in cmd.params if p.param_type_name in ("option", "argument")]
    for param in params:
        if param.metavar is None or param.metavar.startswith("<"):
            param.metavar = metavar_for(param)
        if param.param_type_name == "argument":
            _plain_usage_name(param)
    options = [p for p in params if p.param_type_name == "option" and not p.hidden]
    groups = PANELS.get(path)
    if groups and len(options) > PANEL_THRESHOLD:
        where = {name: title for title, names in groups.items() for name in names}
        for param in options:
            if param.rich_help_panel is None and param.name in where:
                param.rich_help_panel = where[param.name]


def _help_option_without_type(cmd: Any) -> None:
    """`--help` is a flag: no `<bool>` after it (click makes the option per call)."""
    original = cmd.get_help_option
    if getattr(original, "_tailpod", False):
        return

    def get_help_option(ctx: Any) -> Any:
        option = original(ctx)
        if option is not None:
            option.metavar = ""
        return option

    get_help_option._tailpod = True  # type: ignore[attr-defined]
    cmd.get_help_option = get_help_option


def polish_tree(root: Any) -> None:
    """Walk the click tree under root (a typer group) and polish every command."""
    install_panel_renderer()

    def walk(cmd: Any, path: list[str]) -> None:
        polish_command(cmd, " ".join(path))
        _help_option_without_type(cmd)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(root, [])


# The panel's styles, tailpod's own (typer's rich_utils constants differ between its releases).
STYLE_OPTION = "bold cyan"
STYLE_NEGATIVE_OPTION = "bold magenta"
STYLE_REQUIRED = "bold red"
STYLE_VALUE = "bold yellow"
STYLE_DEFAULT = "dim"
STYLE_PANEL_BORDER = "dim"


def default_text(param: Any) -> str | None:
    """`[default: …]` from click's public Parameter fields: the flag form that is on for an
    on/off pair, the value otherwise; None where nothing is worth showing."""
    show = getattr(param, "show_default", None)
    if isinstance(show, str):
        return show
    if show is False:
        return None
    default = param.default
    if callable(default) or default is None or default == "" or default == []:
        return None
    if getattr(param, "is_flag", False):
        if param.secondary_opts:
            longs = [o for o in param.opts if o.startswith("--")] or param.opts
            return (longs[0] if default else param.secondary_opts[0])
        return None
    if isinstance(default, (list, tuple)):
        return ", ".join(str(d) for d in default)
    return str(getattr(default, "value", default))


def parameter_help(param: Any) -> Any:
    """The help cell: the option's help (rich markup, single newlines as spaces), its default
    and whether it is required, built from click's public Parameter fields only."""
    from rich.text import Text

    out = Text()
    if getattr(param, "help", None):
        out.append_text(Text.from_markup(reflow(param.help) or ""))
    shown = default_text(param)
    if shown is not None:
        out.append((" " if out else "") + f"[default: {shown}]", style=STYLE_DEFAULT)
    if getattr(param, "required", False):
        out.append((" " if out else "") + "[required]", style=STYLE_REQUIRED)
    return out


def _options_panel(*, name: str, params: list[Any], ctx: Any, markup_mode: Any,
                   console: Any) -> None:
    """One options panel in three columns: names, what to type, help.

    typer's own panel gives the negative form of a flag (`--no-tailnet`) and the short names
    columns of their own, so at 80 columns a long flag pair leaves the help column some 20
    characters and truncates names (`--no-allow-nonephe…`). Here a flag's forms share one cell,
    one per line, so the name column is as wide as the longest single name. Everything is read
    from click's public Parameter fields; nothing of typer's but the hook that calls this.
    """
    from rich import box
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    table = Table(highlight=True, show_header=False, expand=True, box=None,
                  padding=(0, 1), pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("value", no_wrap=True)
    table.add_column("help", ratio=1)
    for param in params:
        if param.param_type_name == "argument":
            names = [str(param.metavar or param.name or "").upper()]
        else:
            longs = [o for o in param.opts if o.startswith("--")]
            shorts = [o for o in param.opts if not o.startswith("--")]
            first = ", ".join(longs + shorts)
            names = [first, *param.secondary_opts]
        cell = Text()
        for i, label in enumerate(names):
            if i:
                cell.append("\n")
            cell.append(label, style=STYLE_NEGATIVE_OPTION if i else STYLE_OPTION)
        if getattr(param, "required", False):
            cell.append(" *", style=STYLE_REQUIRED)
        shown = ("" if getattr(param, "is_flag", False) or param.param_type_name != "option"
                 else param.metavar or "")
        table.add_row(cell, Text(shown, style=STYLE_VALUE), parameter_help(param))
    if params:
        console.print(Panel(table, border_style=STYLE_PANEL_BORDER, title=name,
                            title_align="left", box=box.ROUNDED))


def install_panel_renderer() -> bool:
    """Route typer's panel drawing through `_options_panel`; False (typer's own layout kept)
    when this typer draws panels differently."""
    try:
        from typer import rich_utils as ru

        sig = inspect.signature(ru._print_options_panel)
        needed = {"name", "params", "ctx", "markup_mode", "console"}
        if set(sig.parameters) != needed:
            return False
    except (ImportError, AttributeError, ValueError):
        return False
    ru._print_options_panel = _options_panel  # type: ignore[assignment]
    return True
