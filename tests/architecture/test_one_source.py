"""One source per fact: the provider list, the results format version and the off-pod stamp are
each written once in tailpod's code (issue 15 step 5); the rest of tailpod imports them."""

from __future__ import annotations

import ast
from pathlib import Path

import tailpod
from tailpod import agent
from tailpod.agent.bootstrap import terminate
from tailpod.config import env_name
from tailpod.preflight.envfile import required_keys
from tailpod.provision.base import TAILNET_KEY_SETTINGS
from tailpod.provision.providers import CLOUD_PROVIDERS, PROVIDERS, provider_class

PACKAGE = Path(tailpod.__file__).parent
# The sandbox emulates the providers from their side; it names them as a cloud would.
SKIPPED = (PACKAGE / "sandbox",)


def _modules() -> list[tuple[Path, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if not any(path.is_relative_to(skip) for skip in SKIPPED):
            out.append((path, ast.parse(path.read_text(encoding="utf-8"))))
    return out


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', '?')}"


def test_the_provider_names_are_listed_once() -> None:
    """No tuple, list or set spells out the cloud providers again (the registry's
    CLOUD_PROVIDERS does; the pod agent's terminate.py keeps its own table because it runs
    without tailpod)."""
    cloud = set(CLOUD_PROVIDERS)
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if cloud <= names:
                    found.append(_where(path, node))
    assert found == []


def test_the_results_format_version_and_stamp_are_defined_once() -> None:
    """Only the pod agent's package assigns SCHEMA_VERSION a number and the stamp its text."""
    versions, stamps = [], []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            value = node.value
            if not isinstance(value, ast.Constant):
                continue
            if any(n.endswith("SCHEMA_VERSION") and not n.startswith("KL_") for n in names):
                versions.append(_where(path, node))
            if value.value == agent.OFF_POD_FLAG:
                stamps.append(_where(path, node))
    assert versions == ["tailpod/agent/__init__.py:" + str(_line_of(agent, "SCHEMA_VERSION ="))]
    assert stamps == ["tailpod/agent/__init__.py:" + str(_line_of(agent, "OFF_POD_FLAG ="))]


def _line_of(module: object, prefix: str) -> int:
    lines = Path(module.__file__).read_text(encoding="utf-8").splitlines()  # type: ignore[attr-defined]
    return next(i for i, line in enumerate(lines, 1) if line.startswith(prefix))


def test_provider_tables_cover_exactly_the_registry() -> None:
    # The on-pod switch cannot import the registry: its tables must name the same clouds.
    assert set(terminate.PROVIDERS) == set(CLOUD_PROVIDERS)
    assert set(terminate.TERMINATE_ROUTES) == set(CLOUD_PROVIDERS)
    assert {terminate.ALIASES[name] for name in CLOUD_PROVIDERS} == set(CLOUD_PROVIDERS)


def _string_constants(value: str) -> list[str]:
    return [_where(path, node) for path, tree in _modules() for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value == value]


def test_the_run_tag_prefix_is_written_once() -> None:
    """`tp-` names every pod, volume and device tailpod makes: only the ledger spells it."""
    assert [w.split(":")[0] for w in _string_constants("tp-")] == ["tailpod/ledger.py"]


def test_the_vendor_api_urls_and_aliases_are_written_once() -> None:
    """The pod agent's termination table holds each provider's API URL and its aliases; settings,
    the dead-man control and the provider table take them from there."""
    for url in ("https://api.runpod.io", "https://console.vast.ai"):
        assert [w.split(":")[0] for w in _string_constants(url)] == [
            "tailpod/agent/bootstrap/terminate.py"], url
    alias_tables = [str(path.relative_to(PACKAGE.parent)) for path, tree in _modules()
                    for node in ast.walk(tree) if isinstance(node, ast.Dict)
                    and any(isinstance(k, ast.Constant) and k.value == "vast" for k in node.keys)]
    assert alias_tables == ["tailpod/agent/bootstrap/terminate.py"]


def test_the_engines_the_probe_reads_are_listed_once() -> None:
    """("vllm", "sglang") as a literal: the probe's PROBE_ENGINES and the cloud engine list only."""
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                names = [e.value for e in node.elts if isinstance(e, ast.Constant)
                         and isinstance(e.value, str)]
                if sorted(names) == ["sglang", "vllm"]:
                    found.append(str(path.relative_to(PACKAGE.parent)))
    assert sorted(found) == ["tailpod/agent/probes/basics.py", "tailpod/engines/adapters.py"]


def test_the_heartbeat_default_is_written_once() -> None:
    """The dead-man control reads the setting, whose default is the one constant."""
    from tailpod.config import DEFAULT_HEARTBEAT_TIMEOUT_S, Settings

    assert Settings.__dataclass_fields__["heartbeat_timeout_s"].default == DEFAULT_HEARTBEAT_TIMEOUT_S


def test_the_speculation_methods_are_listed_once() -> None:
    """The methods tailpod names: engines/base.py SPEC_METHODS, which up, benchmark and matrix
    check through one function (check_spec_method)."""
    from tailpod.engines.base import SPEC_METHODS

    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if names == set(SPEC_METHODS):
                    found.append(str(path.relative_to(PACKAGE.parent)))
    assert found == ["tailpod/engines/base.py"]
    raising = [str(path.relative_to(PACKAGE.parent)) for path, tree in _modules()
               for node in ast.walk(tree) if isinstance(node, ast.Constant)
               and isinstance(node.value, str) and node.value.startswith("unknown --spec-method")]
    assert raising == ["tailpod/engines/base.py"]


def test_one_quantile_rule_and_one_dollars_per_mtok() -> None:
    """Quantiles come from the probe's percentile (no statistics.quantiles beside it), and $/Mtok
    from results/stats.py usd_per_mtok (no second `* 1e6` of a price over tokens)."""
    quantiles = [_where(path, node) for path, tree in _modules() for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and node.attr == "quantiles"]
    assert quantiles == []
    per_million = [_where(path, node) for path, tree in _modules() for node in ast.walk(tree)
                   if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
                   and isinstance(node.right, ast.Constant) and node.right.value == 1e6]
    assert [w.split(":")[0] for w in per_million] == ["tailpod/results/stats.py"]


def test_the_ttl_deadline_is_computed_once() -> None:
    """Hours of TTL become an epoch deadline in config.ttl_deadline alone (one clock read, carried
    by the spec to the ledger and the pod): no other `ttl… * 3600` anywhere in tailpod."""
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
                continue
            sides = (node.left, node.right)
            if (any(isinstance(s, ast.Constant) and s.value in (3600, 3600.0) for s in sides)
                    and any("ttl" in ast.unparse(s).lower() for s in sides)):
                found.append(_where(path, node))
    assert [w.split(":")[0] for w in found] == ["tailpod/config.py"]


def test_each_providers_keys_and_console_are_facts_of_its_class() -> None:
    """What check-requirements needs set, where `down` sends a user to stop a pod by hand and the
    key variable its curl line names come from the provider class (provision/base.py): the key
    variable is its Settings field's, each console URL is written in its provider's module only,
    and no table beside the registry lists them again."""
    for name in PROVIDERS:
        cls = provider_class(name)
        key = [env_name(cls.key_setting)] if cls.key_setting else []
        assert cls.key_env == (key[0] if key else None)
        assert required_keys(name) == tuple(key + [env_name(f) for f in cls.needs_settings])
    for name in CLOUD_PROVIDERS:
        assert provider_class(name).needs_settings == TAILNET_KEY_SETTINGS
    consoles = {name: provider_class(name).console_url for name in PROVIDERS}
    assert {n for n, url in consoles.items() if url} == set(CLOUD_PROVIDERS)
    for name in CLOUD_PROVIDERS:
        url = consoles[name]
        module = PROVIDERS[name][0].replace(".", "/") + ".py"
        assert [w.split(":")[0] for w in _string_constants(url)] == [module], url
    key_names = {provider_class(n).key_env for n in CLOUD_PROVIDERS}
    spelled = [_where(path, node) for path, tree in _modules() for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and node.value in key_names
               and not path.is_relative_to(PACKAGE / "agent")]  # the pod reads its own variables
    assert [w.split(":")[0] for w in spelled] == ["tailpod/config.py"] * len(key_names)
    tables = [_where(path, node) for path, tree in _modules() for node in ast.walk(tree)
              if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                  isinstance(t, ast.Name) and t.id in ("CONSOLE_URLS", "REQUIRED_KEYS")
                  for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))]
    assert tables == []


def test_the_ledgers_pod_facts_are_read_by_field_not_by_string_key() -> None:
    """PodRecord.extra is typed (ledger.py PodExtra): no `.extra.get("…")`, `.extra["…"]` or
    `.extra.setdefault(…)` anywhere in tailpod; a new fact is a new field there."""
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            by_key = isinstance(node, ast.Subscript) or (
                isinstance(node, ast.Attribute) and node.attr in ("get", "setdefault", "pop"))
            target = getattr(node, "value", None) if by_key else None
            if isinstance(target, ast.Attribute) and target.attr == "extra":
                found.append(_where(path, node))
    assert found == []


def test_report_md_writes_only_its_frame_headings_itself() -> None:
    """A report section is a module under results/sections/ (docs/architecture.md, "Adding a
    section"): results/report.py writes no `## ` heading but the frame's own, so a section cannot
    be appended there by hand (tests/unit/results/test_report_registry.py checks the written
    report.md the same way)."""
    path = PACKAGE / "results" / "report.py"
    headings = {
        node.value.split("\n")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and node.value.startswith("## ")
    }  # fmt: skip
    assert headings == {"## Warnings", "## Plots"}
