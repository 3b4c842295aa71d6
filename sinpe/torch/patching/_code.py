"""What a library's code calls, read from its code objects: nothing is run.

:func:`reached` walks from a function through the functions it names within the
library: the module-level functions it names by a global name, those it imports inside
itself, the methods of its class it names (``self._rope(...)``), and the functions
nested in it (comprehensions, closures), recursively.  A submodule's call
(``self.pos_embed(ids)``) is not followed: what a module runs itself is what a stand-in
for that module would have to give.  :func:`calls_trigonometry` says whether a walk
reaches ``cos``, ``sin`` or ``polar`` (``torch.cos``, ``x.sin()``, ``math.cos``,
``torch.polar`` all put the name in ``co_names``): the mark of positional code.
"""

import dis
import sys
import types
from typing import Any, Iterator, Optional

TRIGONOMETRY = frozenset({"cos", "sin", "polar"})
# products that spread vectors into a table (positions times frequencies)
TABLE_PRODUCTS = frozenset({"outer", "ger", "einsum"})
_IMPORT_NAME = dis.opmap["IMPORT_NAME"]


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _codes(constant)


def function_of(value: Any, library: str) -> Optional[types.FunctionType]:
    """The plain function of the library behind ``value`` (a function, a static or class
    method, a bound method, a property's getter), else None."""
    if isinstance(value, property):
        value = value.fget
    value = getattr(value, "__func__", value)
    while isinstance(getattr(value, "__wrapped__", None), types.FunctionType):
        value = value.__wrapped__
    if isinstance(value, types.FunctionType) and (value.__module__ or "").startswith(
            library + "."):
        return value
    return None


def _imported(code: types.CodeType) -> Iterator[str]:
    """Modules a code object imports inside itself (``from .embeddings import f``)."""
    for instruction in dis.get_instructions(code):
        if instruction.opcode == _IMPORT_NAME and isinstance(instruction.argval, str):
            yield instruction.argval


def _named(function: types.FunctionType, owner: Optional[type], library: str
           ) -> Iterator[tuple[str, types.FunctionType]]:
    """The library's functions ``function`` names: globals, in-function imports, methods
    of ``owner`` (by name, as ``(where, function)``)."""
    home = function.__globals__
    package = (home.get("__package__") or "")
    for code in _codes(function.__code__):
        modules = []
        for name in _imported(code):  # (a relative import's level is not read: each
            # package above this one is tried, nearest first)
            parts = package.split(".")
            for depth in range(len(parts), -1, -1):
                module = sys.modules.get(".".join(parts[:depth] + [name]) if name else
                                         ".".join(parts[:depth]))
                if module is not None:
                    modules.append(module)
                    break
        for name in code.co_names:
            candidates = [home.get(name)] + [getattr(m, name, None) for m in modules]
            if owner is not None:
                candidates.append(getattr(owner, name, None))
            for candidate in candidates:
                found = function_of(candidate, library)
                if found is not None:
                    yield name, found


def reached(function: types.FunctionType, owner: Optional[type], library: str
            ) -> set[types.FunctionType]:
    """Every function of the library that ``function`` (a method of ``owner``, or a
    module-level function) reaches, itself included."""
    seen: set[types.FunctionType] = set()
    stack = [function]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        stack.extend(found for _, found in _named(current, owner, library))
    return seen


def calls_trigonometry(functions: set[types.FunctionType]) -> bool:
    return bool(TRIGONOMETRY & names(functions))


def forms_tables(functions: set[types.FunctionType]) -> bool:
    """Whether the walk makes a range (``arange``: positions, frequencies' exponents) and
    reaches a product that spreads vectors into a table: positions times frequencies."""
    read = names(functions)
    return "arange" in read and bool(TABLE_PRODUCTS & read)


def names(functions: set[types.FunctionType]) -> set[str]:
    """Every name the functions' code reads (globals, attributes, methods)."""
    return {name for function in functions for code in _codes(function.__code__)
            for name in code.co_names}


def method_reaches_trigonometry(cls: type, name: str, library: str) -> bool:
    """Whether the class's method ``name`` (found through its MRO, the library's classes
    only) reaches cos, sin or polar."""
    function = function_of(getattr(cls, name, None), library)
    return function is not None and calls_trigonometry(reached(function, cls, library))


def named_globals(function: types.FunctionType, library: str
                  ) -> Iterator[tuple[types.ModuleType, str, types.FunctionType]]:
    """The library's module-level functions ``function`` calls by a global name of its
    module: ``(home module, name, function)``, swapping which changes what it runs."""
    home = sys.modules.get(function.__globals__.get("__name__", ""))
    if home is None:
        return
    for code in _codes(function.__code__):
        for name in code.co_names:
            found = function_of(function.__globals__.get(name), library)
            if found is not None and found is function.__globals__.get(name):
                yield home, name, found
