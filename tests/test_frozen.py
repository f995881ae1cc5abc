"""``@frozen`` behaves as ``@dataclass(frozen=True)``: equality, hash, repr, immutability."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memmodel.frozen import frozen


@frozen
class Ours:
    """A value with a field left out of comparison and one left out of the repr."""

    a: int
    b: tuple[str, ...] = ()
    note: str = field(default="", compare=False)
    hidden: float = field(default=0.0, repr=False)


@dataclass(frozen=True)
class Theirs:
    """The same fields under ``dataclass`` itself."""

    a: int
    b: tuple[str, ...] = ()
    note: str = field(default="", compare=False)
    hidden: float = field(default=0.0, repr=False)


values = st.tuples(
    st.integers(-3, 3),
    st.lists(st.sampled_from("xy"), max_size=2).map(tuple),
    st.sampled_from(["", "n"]),
    st.sampled_from([0.0, 1.5]),
)


@given(values, values)
def test_equality_hash_and_repr_as_dataclass_makes_them(x, y):
    ox, oy, tx, ty = Ours(*x), Ours(*y), Theirs(*x), Theirs(*y)
    assert (ox == oy) is (tx == ty)
    assert (ox != oy) is (tx != ty)
    assert hash(ox) == hash(tx)  # both hash the tuple of compared fields: (a, b, hidden)
    assert repr(ox) == repr(tx).replace("Theirs(", "Ours(")


def test_pinned_behaviour():
    one = Ours(1, ("x",), note="first", hidden=2.0)
    assert one == Ours(1, ("x",), note="other", hidden=2.0)  # note is compare=False
    assert one != Ours(1, ("x",), hidden=3.0)
    assert hash(one) == hash((1, ("x",), 2.0))
    assert repr(one) == "Ours(a=1, b=('x',), note='first')"  # hidden is repr=False
    assert (one == Theirs(1, ("x",), hidden=2.0)) is False  # another class is never equal
    assert len({one, Ours(1, ("x",), note="again", hidden=2.0)}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.a = 2  # type: ignore[misc]
    assert dataclasses.replace(one, a=5).a == 5
    assert dataclasses.is_dataclass(one) and [f.name for f in dataclasses.fields(one)] == ["a", "b", "note", "hidden"]


def test_a_class_keeps_its_own_repr():
    @frozen
    class Shown:
        """Says its own name."""

        a: int

        def __repr__(self) -> str:
            return "shown"

    assert repr(Shown(1)) == "shown" and Shown(1) == Shown(1)
