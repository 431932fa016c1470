"""Temporary edits to a Blender scene, undone in reverse order (the user's .blend is never changed)."""
from __future__ import annotations

_MISSING = object()


class ScenePatch:
    """Records every attribute it sets and every datablock it creates; `restore()` undoes them."""

    def __init__(self):
        self._undo = []

    def set(self, owner, attr: str, value) -> None:
        old = getattr(owner, attr, _MISSING)
        self._undo.append(lambda: setattr(owner, attr, old) if old is not _MISSING else None)
        setattr(owner, attr, value)

    def set_item(self, owner, key: str, value) -> None:
        """Set an ID custom property (owner[key] = value), restoring or deleting it afterwards."""
        old = owner.get(key, _MISSING)

        def undo():
            if old is _MISSING:
                owner.pop(key, None)
            else:
                owner[key] = old
        self._undo.append(undo)
        owner[key] = value

    def on_restore(self, fn) -> None:
        self._undo.append(fn)

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.restore()
        return False
