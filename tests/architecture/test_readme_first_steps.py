"""What a new user reads first in README.md (newcomer-2026-12 section 1, issue 37 item 8): how
`tailpod` gets on PATH, a first rental whose MTP sweep can run on the checkpoint it rents, and a
command table of short rows. At e816682 the README had no Install step, rented Qwen/Qwen3-8B (no
MTP head) for a `--spec-method mtp` sweep, and had command-table rows of up to 1,029 characters."""

from __future__ import annotations

import re

from tests import paths

README = (paths.REPO / "README.md").read_text()
MAKEFILE = (paths.REPO / "Makefile").read_text()

# Checkpoints whose config.json on the Hub declares num_nextn_predict_layers: 1 (an MTP head
# in the weights): https://huggingface.co/XiaomiMiMo/MiMo-7B-RL/blob/main/config.json,
# https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (and their siblings).
HAS_MTP_HEAD = {"XiaomiMiMo/MiMo-7B-RL", "XiaomiMiMo/MiMo-7B-Base", "XiaomiMiMo/MiMo-7B-SFT",
                "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"}


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def _commands(text: str) -> list[str]:
    """The shell commands of a section's code blocks, continuation lines joined."""
    blocks = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", text, re.S)
    joined = "\n".join(blocks).replace("\\\n", " ")
    return [line.split("#")[0].strip() for line in joined.splitlines() if line.strip()]


def test_the_install_section_puts_tailpod_on_path() -> None:
    commands = _commands(_section("Install"))
    on_path = [c for c in commands
               if re.search(r"PATH=.*\.venv/bin", c) or re.fullmatch(r"\. \.venv/bin/activate", c)]
    assert on_path, commands
    targets = [m.group(1) for c in commands for m in [re.match(r"make (\S+)", c)] if m]
    assert targets, commands
    for target in targets:  # each make target it names exists
        assert re.search(rf"^{re.escape(target)}:", MAKEFILE, re.M), target
    # and it runs tailpod itself after the PATH step, so a missing PATH step shows there
    assert commands.index(on_path[0]) < max(i for i, c in enumerate(commands)
                                            if c.startswith("tailpod "))


def test_the_first_rental_pairs_mtp_with_a_checkpoint_that_has_the_head() -> None:
    commands = _commands(_section("A first rental"))
    rented = [m.group(1) for c in commands if c.startswith("tailpod up ")
              for m in [re.search(r"--model (\S+)", c)] if m]
    assert rented, commands
    if any("--spec-method mtp" in c for c in commands):
        assert set(rented) <= HAS_MTP_HEAD, rented
    named = [m.group(1) for c in commands if "--spec-method mtp" in c
             for m in [re.search(r"--model (\S+)", c)] if m]
    assert set(named) <= HAS_MTP_HEAD, named


def test_command_table_rows_are_one_short_line() -> None:
    """Each row is one line of at most 200 characters (the detail is in docs/cli.md); the
    quickstart sections name no commit hash."""
    table = re.search(r"^\| command \|.*?(?=^[^|])", README, re.M | re.S)
    assert table, "README.md has no command table"
    rows = [r for r in table.group(0).splitlines() if r.startswith("| `")]
    assert len(rows) >= 8, rows
    assert [r[:40] for r in rows if len(r) > 200] == []
    for title in ("Install", "Try it without an account"):
        assert re.findall(r"\b[0-9a-f]{7,40}\b", _section(title)) == [], title
