"""What matters in a kernel: the names that application checkpoints save.

Three ways to register a name:

* ``register("model")`` (or ``%checkpoint add model``) follows the variable:
  whatever ``model`` is bound to when a checkpoint is written is saved;
* ``register("weights", model.state_dict())`` saves that object (the variable
  of that name, if any, is not looked at);
* ``register("db", save=fn, restore=fn)``: ``save(folder)`` writes files into
  a folder, ``restore(folder)`` returns the object to put back.

Everything restored lands in the namespace under its name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.checkpoints import check_name
from .store import SaveItem

_UNSET: Any = object()


class NotRegistered(KeyError):
    pass


@dataclass
class Registration:
    name: str
    obj: Any = _UNSET
    save: Callable[[Path], Any] | None = None
    restore: Callable[[Path], Any] | None = None

    @property
    def how(self) -> str:
        if self.save is not None:
            return "callbacks"
        return "variable" if self.obj is _UNSET else "object"


class Registry:
    def __init__(self) -> None:
        self._items: dict[str, Registration] = {}
        #: The user namespace that variables are looked up in (the shell's).
        self.namespace: dict[str, Any] | None = None

    def register(
        self,
        name: str,
        obj: Any = _UNSET,
        *,
        save: Callable[[Path], Any] | None = None,
        restore: Callable[[Path], Any] | None = None,
    ) -> None:
        check_name(name)
        if (save is None) != (restore is None):
            raise ValueError("save and restore callbacks go together: give both or neither")
        if save is not None and obj is not _UNSET:
            raise ValueError("give either an object or save/restore callbacks, not both")
        if save is not None and not (callable(save) and callable(restore)):
            raise TypeError("save and restore must be callables taking a folder path")
        self._items[name] = Registration(name, obj, save, restore)

    def unregister(self, name: str) -> None:
        if self._items.pop(name, None) is None:
            raise NotRegistered(name)

    def get(self, name: str) -> Registration | None:
        return self._items.get(name)

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> list[Registration]:
        return [self._items[n] for n in self.names()]

    def clear(self) -> None:
        self._items.clear()

    def value(self, name: str) -> Any:
        """The object a name stands for now (raises NameError when it has none)."""
        reg = self._items.get(name)
        if reg is not None and reg.obj is not _UNSET:
            return reg.obj
        if self.namespace is not None and name in self.namespace:
            return self.namespace[name]
        raise NameError(f"{name!r} is registered for checkpoints but not defined in the notebook")

    def save_item(self, name: str) -> SaveItem:
        reg = self._items.get(name)
        if reg is None:
            raise NotRegistered(name)
        if reg.save is not None:
            return SaveItem(name, save=reg.save, restore=reg.restore)
        return SaveItem(name, obj=self.value(name))


#: One registry per process: ``jupyter_suspend.register`` works before and
#: after ``%load_ext jupyter_suspend``.
REGISTRY = Registry()
