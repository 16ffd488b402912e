"""The base of the engine's frozen records.

``copy``, ``deepcopy`` and ``pickle`` restore an object attribute by attribute by default,
which a frozen dataclass compiled to native code (``make core``) refuses. Each record says
instead how to rebuild itself through its constructor, so both builds of the engine copy and
pickle their results the same way.
"""

from __future__ import annotations


class Record:
    __slots__ = ()

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        names = getattr(type(self), "__dataclass_fields__")  # noqa: B009 - set by @dataclass
        return (type(self), tuple(getattr(self, name) for name in names))
