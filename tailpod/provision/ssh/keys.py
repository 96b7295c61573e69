"""The user's SSH key: find it, load it (with a passphrase if it has one), and say clearly why not.

paramiko's own loader reports a wrong passphrase on an OpenSSH-format key as "no BEGIN/END
delimiters", so the key is first loaded without a passphrase to learn whether it is encrypted, and
only then with one; each failure maps to one sentence the user can act on.
"""

from __future__ import annotations

from pathlib import Path

import paramiko
from paramiko.pkey import UnknownKeyType

from tailpod.errors import ConfigError
from tailpod.secrets import Secret

# Tried in order when TAILPOD_SSH_KEY is unset, like `ssh` itself does.
DEFAULT_KEY_NAMES = ("id_ed25519", "id_ecdsa", "id_rsa")


def resolve_key_path(ssh_key: Path | None, ssh_dir: Path | None = None) -> Path:
    """The private key to use: the configured one, else the first default key under ~/.ssh."""
    if ssh_key is not None:
        return Path(ssh_key).expanduser()
    ssh_dir = ssh_dir if ssh_dir is not None else Path.home() / ".ssh"
    for name in DEFAULT_KEY_NAMES:
        candidate = ssh_dir / name
        if candidate.is_file():
            return candidate
    raise ConfigError(
        "no SSH key configured and none found in ~/.ssh",
        hint="set TAILPOD_SSH_KEY to a private key file (create one with `ssh-keygen -t ed25519`)",
    )


def load_private_key(path: Path, passphrase: Secret | str | None = None) -> paramiko.PKey:
    """Load a private key, raising ConfigError with one clear line for each way this goes wrong."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"SSH key file {path} does not exist",
            hint="set TAILPOD_SSH_KEY to your private key file",
        )
    try:
        head = path.read_bytes()[:4096]
    except OSError as exc:
        raise ConfigError(f"cannot read SSH key file {path} ({exc.strerror})") from None
    if b"PRIVATE KEY-----" not in head:
        hint = "point TAILPOD_SSH_KEY at the private key, not the .pub file"
        raise ConfigError(f"{path} is not a private key file", hint=hint)

    try:
        return paramiko.PKey.from_path(str(path), None)
    except TypeError:
        pass  # cryptography says: encrypted, a passphrase is needed
    except UnknownKeyType as exc:
        raise ConfigError(f"{path}: unsupported SSH key type {exc.key_type}") from None
    except (ValueError, paramiko.SSHException) as exc:
        raise ConfigError(f"{path} is not a usable private key ({_short(exc)})") from None

    if passphrase is None or not (
        passphrase.reveal() if isinstance(passphrase, Secret) else passphrase
    ):
        raise ConfigError(
            f"SSH key {path} is protected by a passphrase",
            hint="set TAILPOD_SSH_KEY_PASSPHRASE (in .env or the environment)",
        )
    secret = passphrase.reveal() if isinstance(passphrase, Secret) else passphrase
    try:
        # cryptography wants bytes here, whatever the stub says
        return paramiko.PKey.from_path(str(path), secret.encode())  # type: ignore[arg-type]
    except (ValueError, TypeError, paramiko.SSHException):
        raise ConfigError(
            f"wrong passphrase for SSH key {path}",
            hint="check TAILPOD_SSH_KEY_PASSPHRASE",
        ) from None


def public_key_line(key: paramiko.PKey, comment: str = "tailpod") -> str:
    """The authorized_keys line for `key` (what a pod's PUBLIC_KEY env var carries)."""
    return f"{key.get_name()} {key.get_base64()} {comment}".strip()


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    return text[:120]
