"""How a trace request's prompt is built (agent/probes/arrival.py `fit_prompt`, `block_source`,
`words_prompt`) and how an open-loop schedule is drawn (`schedule`): the word counts the engine is
asked about, step by step, worked out by hand from each made-up tokenizer; blocks of a Mooncake
prompt; Poisson as gamma of shape 1 (issue 37 item 10, `make mutate`)."""

from __future__ import annotations

import random
from collections.abc import Callable

from tailpod.agent.probes.arrival import (
    Arrival,
    block_source,
    fit_prompt,
    schedule,
    words_prompt,
)


def _asked(per_word: Callable[[int], int]) -> tuple[list[int], Callable[[str], int]]:
    """A tokenizer from words to tokens, and the word counts it was asked about, in order."""
    asked: list[int] = []

    def count(text: str) -> int:
        asked.append(len(text.split()))
        return per_word(asked[-1])

    return asked, count


def test_a_step_that_rounds_to_nothing_moves_one_word_up() -> None:
    # 3 tokens a word, 100 wanted: from round(100 / 1.3) = 77 words (231 tokens) a step of
    # round(-131 / 3) = -44 to 33 (99); round(1 / 3) = 0, so one word up to 34 (102); then
    # round(-2 / 3) = -1 back to 33, already asked: stop. 99 is nearest 100.
    asked, count = _asked(lambda n: 3 * n)
    assert fit_prompt("a b c", 100, count)[1:] == (33, 99)
    assert asked == [77, 33, 34]


def test_a_step_that_rounds_to_nothing_moves_one_word_down() -> None:
    # 101 wanted: 78 words (234) → round(-133 / 3) = -44 → 34 (102); round(-1 / 3) = 0, so one
    # word down to 33 (99); round(2 / 3) = 1 back to 34: stop. 102 is nearer 101 than 99.
    asked, count = _asked(lambda n: 3 * n)
    assert fit_prompt("a b c", 101, count)[1:] == (34, 102)
    assert asked == [78, 34, 33]


def test_under_a_token_a_word_the_step_is_still_proportional() -> None:
    # half a token a word (n // 2), 100 wanted: 77 words (38) → round(62 / (38 / 77)) = 126 →
    # 203 (101) → round(-1 / (101 / 203)) = -2 → 201 (100): exact
    asked, count = _asked(lambda n: n // 2)
    assert fit_prompt("a b c", 100, count)[1:] == (201, 100)
    assert asked == [77, 203, 201]


def test_the_step_stops_at_one_word() -> None:
    # 1000 tokens a word: 77 words → round(-76900 / 1000) = -77 → max(1, 0) = 1 (1000);
    # round(-900 / 1000) = -1 → 1 again: stop
    asked, count = _asked(lambda n: 1000 * n)
    assert fit_prompt("a b c", 100, count)[1:] == (1, 1000)
    assert asked == [77, 1]


def test_a_tokenizer_that_counts_nothing_walks_up_a_word_at_a_time_eight_times() -> None:
    asked, count = _asked(lambda n: 0)
    # no tokens a word: no proportional step, one word up per try, the engine asked 8 times;
    # every count is as far from 100: the first, shortest, is kept
    assert fit_prompt("a b c", 100, count)[1:] == (77, 0)
    assert asked == list(range(77, 85))


def test_words_and_blocks_of_empty_texts_say_hello() -> None:
    assert words_prompt("", 3) == "hello hello hello"
    per_block = round(512 / 1.3)  # 394 words a Mooncake block of 512 tokens
    text = block_source("", "the class prompt", (7, 8), 100)
    # 100 tokens span one block (of the two hash ids), then the class's own text
    assert text == " ".join((["block-7", "hello"] * per_block)[:per_block]) + " the class prompt"


def test_poisson_ignores_burstiness_and_gamma_of_shape_one_is_poisson() -> None:
    poisson = schedule(Arrival("poisson", 2.0, 1.0, seed=5, requests=6))
    # exponential gaps of mean 1/rate from the seed's own generator, the first request at 0
    rng, expected = random.Random(5), [0.0]
    while len(expected) < 6:
        expected.append(expected[-1] + rng.expovariate(2.0))
    assert poisson == expected
    assert schedule(Arrival("poisson", 2.0, 3.0, seed=5, requests=6)) == poisson
    assert schedule(Arrival("gamma", 2.0, 1.0, seed=5, requests=6)) == poisson
    assert schedule(Arrival("gamma", 2.0, 3.0, seed=5, requests=6)) != poisson
    # gamma gaps of shape = burstiness and mean 1/rate (scale 1 / (rate × shape))
    rng, expected = random.Random(5), [0.0]
    while len(expected) < 6:
        expected.append(expected[-1] + rng.gammavariate(2.0, 1.0 / (2.0 * 2.0)))
    assert schedule(Arrival("gamma", 2.0, 2.0, seed=5, requests=6)) == expected
