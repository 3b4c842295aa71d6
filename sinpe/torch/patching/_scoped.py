"""Swaps of a library's functions that act only inside a patched model's (or pipeline's)
own calls.

A swapped apply function gives the original's bits, so every model of the family may
run it.  A positional function's stand-in gives exact values instead, whose bits
differ from the library's own float32 ones: a model that was not patched must keep the
library's.  So such a global is swapped for a :class:`Scoped` call, which is sinpe's
only while a patched object's :class:`Entered` method runs (a context variable, so
threads and asynchronous tasks each see their own), and the original everywhere else.
"""

import contextvars
from typing import Any, Callable

_INSIDE: contextvars.ContextVar[int] = contextvars.ContextVar("sinpe_patched_call", default=0)


def inside() -> bool:
    """Whether a patched model's or pipeline's own call is running."""
    return _INSIDE.get() > 0


class Entered:
    """A patched object's method (a model's ``forward``, a pipeline's method that calls a
    positional function): the method itself, with sinpe's scoped swaps acting during it."""

    def __init__(self, method: Callable[..., Any]) -> None:
        self.method = method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        token = _INSIDE.set(_INSIDE.get() + 1)
        try:
            return self.method(*args, **kwargs)
        finally:
            _INSIDE.reset(token)


class Scoped:
    """A global's stand-in: ``call`` inside a patched object's call, ``original`` outside."""

    def __init__(self, original: Callable[..., Any], call: Callable[..., Any]) -> None:
        self.original = original
        self.call = call
        self.__name__ = getattr(original, "__name__", "scoped")
        self.__qualname__ = getattr(original, "__qualname__", self.__name__)
        self.__doc__ = getattr(original, "__doc__", None)
        self.__wrapped__ = original

    @property
    def on_failure(self) -> Any:
        return getattr(self.call, "on_failure", None)

    @on_failure.setter
    def on_failure(self, report: Any) -> None:
        self.call.on_failure = report

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _INSIDE.get() > 0:
            return self.call(*args, **kwargs)
        return self.original(*args, **kwargs)
