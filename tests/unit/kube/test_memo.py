"""``kube.memo.Memo``: the last few answers of a pure function by the JSON it reads."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from linkerd_config.kube.memo import Memo, json_digest


class Counting:
    def __init__(self) -> None:
        self.made: list[Any] = []

    def __call__(self, read: Any) -> Any:
        def make() -> Any:
            self.made.append(read)
            return {"answer": read}

        return make


def test_equal_json_is_one_answer_whatever_the_objects() -> None:
    memo: Memo[Any] = Memo(4)
    make = Counting()
    first = memo.get_or_make({"a": 1, "b": [1, 2]}, make({"a": 1}))
    again = memo.get_or_make({"b": [1, 2], "a": 1}, make({"a": 2}))  # keys in another order
    assert first is again
    assert len(make.made) == 1
    memo.get_or_make({"a": 1, "b": [1, 3]}, make("other"))
    assert len(make.made) == 2


def test_the_least_recently_used_is_forgotten_first() -> None:
    memo: Memo[Any] = Memo(2)
    make = Counting()
    memo.get_or_make("a", make("a"))
    memo.get_or_make("b", make("b"))
    memo.get_or_make("a", make("a"))  # used: "b" is now the oldest
    memo.get_or_make("c", make("c"))
    assert len(memo) == 2
    memo.get_or_make("a", make("a"))
    assert make.made == ["a", "b", "c"]
    memo.get_or_make("b", make("b"))
    assert make.made == ["a", "b", "c", "b"]


@pytest.mark.parametrize("read", [{1: "int key"}, {"s": {1, 2}}, object()])
def test_what_is_not_json_is_made_every_time(read: Any) -> None:
    memo: Memo[Any] = Memo(4)
    make = Counting()
    for _ in range(2):
        memo.get_or_make(read, make(read))
    assert len(make.made) == 2
    assert len(memo) == 0
    assert json_digest(read) is None


def test_errors_are_not_remembered() -> None:
    memo: Memo[Any] = Memo(4)
    calls = []

    def failing() -> Any:
        calls.append(1)
        raise ValueError("no")

    for _ in range(2):
        with pytest.raises(ValueError):
            memo.get_or_make("x", failing)
    assert len(calls) == 2
    assert len(memo) == 0


def test_threads_get_the_answer_for_their_own_input() -> None:
    memo: Memo[Any] = Memo(3)
    wrong: list[tuple[int, Any]] = []

    def worker(seed: int) -> None:
        for n in range(300):
            key = (seed * 7 + n) % 5
            got = memo.get_or_make(["k", key], lambda key=key: {"answer": key})
            if got != {"answer": key}:
                wrong.append((key, got))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert len(memo) <= 3
