"""A small memo for pure functions whose first arguments are unhashable specs (pydantic models
with list/dict fields): they are keyed by identity and kept alive by the cache itself."""

from __future__ import annotations

import functools
from typing import Any, Callable


_ALL_CACHES: list[dict] = []


def clear_all_memos() -> None:
    """Empty every memo_by_identity cache (a cold start without a new process: benchmarks, tests)."""
    for cache in _ALL_CACHES:
        cache.clear()


def memo_by_identity(n_objects: int, maxsize: int = 200_000) -> Callable:
    def wrap(fn: Callable) -> Callable:
        cache: dict[tuple, Any] = {}
        _ALL_CACHES.append(cache)

        @functools.wraps(fn)
        def inner(*args: Any) -> Any:
            key = (id(args[0]), *args[1:]) if n_objects == 1 else (*map(id, args[:n_objects]), *args[n_objects:])
            hit = cache.get(key)
            if hit is None:
                if len(cache) >= maxsize:
                    cache.clear()
                hit = (fn(*args), args[:n_objects])  # keep the objects alive while keyed by id
                cache[key] = hit
            return hit[0]

        inner.cache_clear = cache.clear  # type: ignore[attr-defined]
        return inner

    return wrap
