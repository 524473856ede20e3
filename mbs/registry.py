"""One small registry type for every extension point (verifiers, answer types, loaders, ...).

A :class:`Registry` maps names to objects that their own modules register with real imports,
so a reader (and a type checker) can follow every edge; an unknown name raises an error that
lists the known ones. It replaces the copied bare decorators and the ``"module:function"``
string tables resolved by importlib::

    LOADERS: Registry[Loader] = Registry("data loader")

    @LOADERS.register("jsonl")
    def load_jsonl(...): ...

    LOADERS.get("jsonl")      # the function
    LOADERS.get("jsnol")      # UnknownNameError: unknown data loader 'jsnol'; known: jsonl
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from mbs.errors import UnknownNameError

T = TypeVar("T")
F = TypeVar("F")


class Registry(Generic[T]):
    """Names -> registered objects of one kind, in registration order.

    Args:
        kind: What is registered, for error messages (``"verifier"``, ``"data loader"``).
        error: The exception type :meth:`get` raises for an unknown name (a subclass of
            :class:`mbs.errors.UnknownNameError`, called with one message).
        hint: Text appended to the list of known names in that message (e.g. other accepted
            forms of a name).
    """

    def __init__(self, kind: str, error: type[UnknownNameError] = UnknownNameError, hint: str = "") -> None:
        self.kind = kind
        self.error = error
        self.hint = hint
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        """Register ``item`` under ``name`` and return it.

        Registering the same object again (a module imported twice, e.g. by path and by name,
        or reloaded) is allowed when it has the same module and qualified name (a spec: when
        every field does, see :func:`_identity`).

        Raises:
            ValueError: ``name`` is empty or already taken by a different object.
        """
        if not name:
            raise ValueError(f"a {self.kind} needs a non-empty name")
        old = self._items.get(name)
        if old is not None and old is not item and _identity(old) != _identity(item):
            raise ValueError(f"{self.kind} {name!r} is already registered to {_identity(old)}")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: register the decorated function or class under ``name``, unchanged."""

        def decorator(item: F) -> F:
            self.add(name, item)  # type: ignore[arg-type]
            return item

        return decorator

    def get(self, name: str) -> T:
        """The object registered under ``name``.

        Raises:
            UnknownNameError: (or this registry's ``error``) ``name`` is not registered; the
                message lists the known names.
        """
        try:
            return self._items[name]
        except KeyError:
            raise self.error(self.unknown_message(name)) from None

    def unknown_message(self, name: str, why: str = "") -> str:
        """The message of the error for an unknown ``name`` (``why``: a detail after the name)."""
        known = ", ".join(self.names()) or "none"
        return f"unknown {self.kind} {name!r}{why}; valid names: {known}{self.hint}"

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        """``(name, object)`` pairs in registration order."""
        return list(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def _identity(item: object) -> str:
    """What tells re-registering an object from a clash: ``module.qualname`` of a function or
    class; for a dataclass instance (a spec such as a synthesis method's or an answer type's)
    its type and the identity of every field, so two specs under one name are the same only
    when all their fields are (functions by module and qualified name); else the repr."""
    module, qualname = getattr(item, "__module__", None), getattr(item, "__qualname__", None)
    if module and qualname:
        return f"{module}.{qualname}"
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        parts = ", ".join(f"{f.name}={_identity(getattr(item, f.name))}" for f in dataclasses.fields(item))
        return f"{type(item).__module__}.{type(item).__qualname__}({parts})"
    return repr(item)
