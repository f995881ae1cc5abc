"""``@frozen``: a frozen dataclass whose equality, hash and repr are written once here.

``dataclasses.dataclass(frozen=True)`` compiles six methods per class when its module is
imported (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``,
``__delattr__``), about 0.1 ms each; ``memmodel compare`` imports some thirty such classes
before it can print anything. ``@frozen`` lets ``dataclass`` compile the four it must and
gives every class the same ``__eq__``, ``__hash__`` and ``__repr__``, which read the field
names kept on the class and behave as ``dataclass``'s own: equal when of the same class and
equal over the fields with ``compare=True``; hashed over the fields ``dataclass`` would hash;
``Name(field=value, ...)`` over the fields with ``repr=True``.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

try:
    from typing import dataclass_transform
except ImportError:  # Python 3.10: type checkers then read it from typing_extensions

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:  # type: ignore[no-redef]
        return lambda f: f


T = TypeVar("T", bound=type)


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return tuple(getattr(self, n) for n in self.__frozen_compared__) == tuple(
        getattr(other, n) for n in self.__frozen_compared__
    )


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in self.__frozen_hashed__))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__frozen_shown__)
    return f"{self.__class__.__qualname__}({shown})"


@dataclass_transform(frozen_default=True)
def frozen(cls: T) -> T:
    """``cls`` as ``@dataclass(frozen=True)`` makes it (a class that defines its own
    ``__eq__``, ``__hash__`` or ``__repr__`` keeps it)."""
    own = set(vars(cls))
    cls = dataclass(frozen=True, eq=False, repr=False)(cls)
    every = fields(cls)
    cls.__frozen_compared__ = tuple(f.name for f in every if f.compare)
    cls.__frozen_hashed__ = tuple(f.name for f in every if (f.compare if f.hash is None else f.hash))
    cls.__frozen_shown__ = tuple(f.name for f in every if f.repr)
    if "__eq__" not in own:
        cls.__eq__ = _eq
        if "__hash__" not in own:
            cls.__hash__ = _hash
    if "__repr__" not in own:
        cls.__repr__ = _repr
    return cls
