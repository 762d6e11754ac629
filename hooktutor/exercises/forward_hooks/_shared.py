"""What several exercises of ``02_forward_hooks.ipynb`` share."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...inventory import hook_ids


class CallerHooks:
    """Dimension ``left_as_found`` for hooks: the caller's own hooks on some modules (a no-op hook
    of ``kind``, "forward" or "forward_pre", on each) are attached before the answer runs and must
    still be attached after it. An answer that clears ``module._forward_hooks`` (or calls
    ``remove_hooks``) instead of removing its own handles wipes them. The caller's hooks are removed
    on exit. Do not use it around a :class:`kit.HookWitness` of the same kind: they would count as
    the answer's hooks."""

    def __init__(self, t: Any, modules: dict[str, nn.Module], kind: str = "forward") -> None:
        self.t, self.modules, self.kind = t, modules, kind
        self.handles: dict[str, Any] = {}

    def __enter__(self) -> CallerHooks:
        for name, module in self.modules.items():
            if self.kind == "forward":
                self.handles[name] = module.register_forward_hook(lambda m, a, o: None)
            else:
                self.handles[name] = module.register_forward_pre_hook(lambda m, a: None)
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        gone = [name for name, h in self.handles.items() if h.id not in hook_ids(self.modules[name], self.kind)]
        for handle in self.handles.values():
            handle.remove()
        if kind is None and gone:
            self.t.expect(False, what=f"the caller's own {self.kind} hook on {gone[0]!r} after your code ran",
                          expected="still attached", got="removed", nudge=(
                              "your code removed a hook it did not attach: remove only your own handles "
                              "(handle.remove()), never by clearing module._forward_hooks or "
                              "module._forward_pre_hooks, nor with remove_hooks(model)"))
