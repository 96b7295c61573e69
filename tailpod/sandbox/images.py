"""What the sandbox knows of real images: their ENTRYPOINT and CMD, and how Docker composes them.

A container's process is ENTRYPOINT + CMD, where a start command given at create time replaces
CMD (RunPod's `args`, "Arguments passed to the container entrypoint") and, in RunPod's JSON form
`{"entrypoint": [...], "cmd": [...]}`, the entrypoint too. The registry stand-in serves these
configs (so `docker inspect`-style reads agree with what the pods run), and the sandbox pod host
composes each pod's process from them, so a start command that would crash on the real image
crashes here as well. Sources of each image's config are in docs/providers.md.

Image programs cannot run here (no GPU, no multi-GB image): an ENTRYPOINT that is an engine is
played by `entrypoint_verdict`, which answers like the program's argument parser would for
arguments that are not the engine's (the usage error argparse prints, exit status 2).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class ImageConfig:
    repository: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    source: str = ""  # where the fact comes from (Dockerfile: repository, path, commit)
    env: tuple[str, ...] = ()  # the config's Env ("NAME=value"), e.g. CUDA_VERSION

    def config_blob(self) -> dict[str, object]:
        """The image config JSON as a registry serves it (OCI image config, `config` part)."""
        return {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": list(self.entrypoint) or None, "Cmd": list(self.cmd) or None,
                       "Env": list(self.env) or None},
        }


# Each fact cites the Dockerfile stage that builds the published image.
KNOWN_IMAGES: dict[str, ImageConfig] = {
    "vllm/vllm-openai": ImageConfig(
        "vllm/vllm-openai", entrypoint=("vllm", "serve"),
        # CUDA_VERSION is what the nvidia/cuda base stage sets; the value is the sandbox's
        # (the Dockerfile's default ARG), not verified for every published tag
        env=("CUDA_VERSION=12.8.1", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"),
        source="vllm-project/vllm docker/Dockerfile @ dead20baf70df70580ecb093f82b0b7b8676e4f5 "
               "(stage vllm-openai; older releases: python3 -m vllm.entrypoints.openai.api_server "
               "@ 0000977eaf873be6a295cf73017976d49ca2fb9d)"),
    "lmsysorg/sglang": ImageConfig(
        "lmsysorg/sglang",
        source="sgl-project/sglang docker/Dockerfile @ 924d890f1c840188bf6ffd9ccd62e7508cc248a2 "
               "(no ENTRYPOINT or CMD of its own; what its base image sets is unverified)"),
    "runpod/pytorch": ImageConfig(
        "runpod/pytorch", cmd=("/start.sh",),
        source="runpod/containers official-templates/pytorch/Dockerfile @ "
               "76568da4bb0864c8daf0b908a47c4d32f8778e90 (CMD [\"/start.sh\"], no ENTRYPOINT)"),
}

_REPO_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")  # a Hub repo id, as vllm serve's positional

# Programs whose argument parser the sandbox plays: the first word of an ENTRYPOINT.
ENGINE_PROGRAMS = {"vllm": "vllm serve", "python3": "python3 -m vllm.entrypoints.openai.api_server"}


def repository_of(image: str) -> str:
    """`docker.io/library/x:tag@sha256:..` -> `library/x`; `vllm/vllm-openai:v1` -> that repo."""
    ref = image.split("@", 1)[0]
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        ref = rest  # drop a registry host
    name, _, _tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    return name or ref


def image_config(image: str) -> ImageConfig:
    """The config the sandbox assumes for `image`; unknown images have neither ENTRYPOINT nor
    CMD, like a plain base image whose start command is the whole process."""
    repo = repository_of(image)
    return KNOWN_IMAGES.get(repo) or KNOWN_IMAGES.get(repo.removeprefix("library/")) \
        or ImageConfig(repo)


def parse_start_command(args: str | list[str] | None, *, json_form: bool = True,
                        ) -> tuple[list[str] | None, list[str] | None]:
    """(entrypoint override, cmd) from a start command.

    RunPod splits a start-command string either as the JSON object `{"cmd": [...],
    "entrypoint": [...]}` or shlex-style (runpod/docs pods/templates/manage-templates.mdx); a
    list is already argv (vast `args`). None for a part that is not overridden. Whether v2
    `args` decodes the JSON form is undocumented (BaseContainerConfig.args says only
    "Arguments passed to the container entrypoint"): `json_form=False` plays the other answer,
    where the JSON text is shlex-split onto the image's ENTRYPOINT like any other string.
    """
    if args is None or args == "" or args == []:
        return None, None
    if isinstance(args, list):
        return None, [str(a) for a in args]
    text = args.strip()
    if json_form and text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict) and set(data) <= {"cmd", "entrypoint"}:
            entry = data.get("entrypoint")
            cmd = data.get("cmd")
            return ([str(a) for a in entry] if isinstance(entry, list) else None,
                    [str(a) for a in cmd] if isinstance(cmd, list) else None)
    return None, shlex.split(text)


def compose(config: ImageConfig, args: str | list[str] | None, *,
            json_form: bool = True) -> list[str]:
    """The container's argv as Docker composes it: an entrypoint override also clears the
    image's CMD; otherwise given arguments replace CMD and follow the image's ENTRYPOINT."""
    entry_override, cmd = parse_start_command(args, json_form=json_form)
    if entry_override is not None:
        return entry_override + (cmd or [])
    return list(config.entrypoint) + (cmd if cmd is not None else list(config.cmd))


def entrypoint_verdict(argv: list[str]) -> str | None:
    """What an engine entrypoint prints when handed arguments that are not its own, or None when
    `argv` is not an engine program the sandbox plays (it runs as given)."""
    if not argv or argv[0] not in ENGINE_PROGRAMS:
        return None
    if argv[0] == "python3" and argv[1:3] != ["-m", "vllm.entrypoints.openai.api_server"]:
        return None
    program = ENGINE_PROGRAMS[argv[0]]
    rest = argv[2:] if argv[0] == "vllm" else argv[3:]
    if argv[0] == "vllm" and argv[1:2] != ["serve"]:
        return None
    if argv[0] == "vllm" and rest and not rest[0].startswith("-"):
        model, rest = rest[0], rest[1:]  # `vllm serve` takes one positional: the model
        if not model.startswith("/") and not _REPO_ID.match(model):
            # a start command handed over as one word (RunPod's JSON form, shlex-split onto
            # the ENTRYPOINT) becomes the model: transformers' AutoConfig refuses it
            return (f"OSError: {model[:200]} is not a local folder and is not a valid model "
                    "identifier listed on 'https://huggingface.co/models'")
    unknown = [a for a in rest if not a.startswith("--")]
    if not unknown:
        return (f"{program}: the sandbox does not run engine images' own servers; "
                "start the engine over SSH as tailpod does")
    shown = " ".join(shlex.quote(a) for a in unknown)[:300]
    return f"usage: {program} [options]\n{program}: error: unrecognized arguments: {shown}"


def main(argv: list[str]) -> int:
    """The stand-in process for an engine ENTRYPOINT: print what the program would, exit."""
    import sys

    verdict = entrypoint_verdict(argv) or "the sandbox has no stand-in for this program"
    sys.stderr.write(verdict + "\n")
    return 2 if "unrecognized arguments" in verdict else 1  # argparse exits 2, an OSError 1


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
