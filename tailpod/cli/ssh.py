"""`tailpod ssh [RUN_TAG [COMMAND...]]`: a shell on the pod, or one command run there as `ssh host
COMMAND` would, its host key checked against tailpod's pins."""

from __future__ import annotations

import os
import shlex
import shutil

import typer

from tailpod.cli.common import console, err_console, handle_errors, ledger_for, settings_from
from tailpod.errors import TailpodError
from tailpod.pods.cloud import target_for_record
from tailpod.provision.ssh import (
    KnownHosts,
    known_hosts_path,
    open_ssh,
    resolve_key_path,
    ssh_command,
    ssh_host_alias,
    write_ssh_config_entry,
)


def with_remote_command(argv: list[str], command: list[str]) -> list[str]:
    """`argv` (ending in `user@host`) running `command` on the pod. `--` before the destination
    ends ssh's own options, so a command word such as `-la` is never read as one of them; the
    words are joined with spaces, as `ssh host CMD` itself joins them for the remote shell."""
    if not command:
        return argv
    return [*argv[:-1], "--", argv[-1], " ".join(command)]


def register(app: typer.Typer) -> None:
    # A command after the tag is the remote command, as with `ssh host CMD`: an option tailpod
    # does not know belongs to it (`tailpod ssh TAG ls -la`); `ssh`'s own options (--print,
    # --config, --wait) keep their meaning wherever they stand.
    @app.command("ssh", context_settings={"ignore_unknown_options": True})
    @handle_errors
    def ssh(
        run_tag: str | None = typer.Argument(None, help="Run tag (default: the only active pod)."),
        command: list[str] | None = typer.Argument(
            None,
            help="A command to run on the pod instead of a shell (after the tag, as with `ssh host "
            "CMD`); its words are joined with spaces, as ssh does.",
        ),
        print_only: bool = typer.Option(
            False, "--print", help="Print the ssh command instead of running it."
        ),
        config: bool = typer.Option(
            False,
            "--config",
            help="Write a `Host tailpod-<run tag>` entry to tailpod's own ssh config file and "
            "print the Include line for ~/.ssh/config (which tailpod never edits).",
        ),
        wait_s: float = typer.Option(
            30.0, "--wait", help="Seconds to wait for the pod's sshd on first contact."
        ),
    ) -> None:
        """Open a shell on a pod, or run one command there (over the tailnet when it joined one)."""
        settings = settings_from()
        record = ledger_for(settings).resolve(run_tag)
        target = target_for_record(settings, record)
        key_path = resolve_key_path(settings.ssh_key)
        known_hosts = known_hosts_path(settings.home)

        pinned = bool(KnownHosts(known_hosts).lookup(target.known_hosts_entry))
        if not pinned and not print_only:
            # First contact goes through paramiko, which pins the key; `ssh` then checks strictly.
            with open_ssh(settings, target, wait_s=wait_s, on_event=err_console.print):
                pass
        elif not pinned:
            err_console.print(
                f"note: no host key pinned for {target.known_hosts_entry} yet; run `tailpod ssh` "
                "once (without --print) to pin it"
            )

        if config:
            path, include = write_ssh_config_entry(
                settings.home,
                record.run_tag,
                target.host,
                target.port,
                target.user,
                key_path,
                host_key_alias=target.known_hosts_entry,
            )
            console.print(f"wrote {path}", markup=False)
            console.print(f"add this line at the top of ~/.ssh/config:\n  {include}", markup=False)
            console.print(f"then: ssh {ssh_host_alias(record.run_tag)}", markup=False)
            return

        argv = with_remote_command(
            ssh_command(
                target.host,
                target.port,
                target.user,
                key_path,
                known_hosts,
                host_key_alias=target.known_hosts_entry,
            ),
            command or [],
        )
        if print_only:
            console.print(shlex.join(argv), markup=False, soft_wrap=True)
            return
        binary = shutil.which("ssh")
        if binary is None:
            raise TailpodError(
                "the `ssh` client is not installed", hint="install OpenSSH's client, or use --print"
            )
        os.execv(binary, argv)
