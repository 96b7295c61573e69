"""`probe run`'s options are RunOptions' fields, every one of them: no field the laptop cannot
set (the cells say arm, concurrency, rep, class and cache), and no option outside RunOptions."""

from __future__ import annotations

import dataclasses

import pytest

from tailpod.agent import verbs
from tailpod.agent.envelope import UsageError
from tailpod.agent.probes.load import RunOptions

# What the laptop sends (measure/hosts.py) and the probe measures with, spelt out here.
OPTIONS = {"base_url", "model", "run_id", "requests_per_cell", "max_tokens", "ignore_eos",
           "temperature", "prompts_dir", "warmup", "engine", "api", "transport",
           "request_timeout", "client_bound_threshold", "slo", "slo_percentile", "workers",
           "unique_schema"}


def test_every_run_option_is_one_the_laptop_may_set() -> None:
    assert {f.name for f in dataclasses.fields(RunOptions)} == OPTIONS
    assert set(verbs._RUN_OPTIONS) == OPTIONS


@pytest.mark.parametrize("cell_key", ["arm", "concurrency", "reps", "prompt_classes", "cache",
                                      "out"])
def test_what_a_cell_says_is_refused_as_an_option(cell_key: str) -> None:
    with pytest.raises(UsageError, match=cell_key):
        verbs.cmd_probe_run({"options": {cell_key: 1},
                             "cells": [{"arm": "a", "rep": 0, "prompt_class": "prose"}]})
