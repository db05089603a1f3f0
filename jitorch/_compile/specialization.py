"""One compiled specialization of a function (`Entry`: its guards and how it runs) and the process-wide settings
(``jitorch.compiler.config``) that decide when a call makes a new one.

>>> e = Entry([("arg0.shape", (3,)), ("grad_mode", True)])
>>> e.key, e.run is None
([(3,), True], True)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .replay import Replay

__all__ = ["Entry", "config"]


class _Config:
    """Process-wide settings (``jitorch.compiler.config``); ``recompile_limit`` as in ``torch._dynamo.config``.

    ``dynamic_after_changes``: a dimension whose size changed this many times becomes symbolic (``dynamic=None``).
    ``dynamic_eager_calls``: how many calls at a new size a dynamic specialization runs eagerly before it compiles
    that size's kernels (a size seen once, as in a generation loop, costs no compile time).
    """

    recompile_limit = 8
    dynamic_after_changes = 2
    dynamic_eager_calls = 1
    # ``torch.compiler.set_stance``: "default"; "force_eager" runs every compiled function eagerly;
    # "eager_on_recompile" runs a call that matches no compiled entry eagerly; "fail_on_recompile" raises instead.
    stance = "default"


config = _Config()


@dataclass
class Entry:
    """One specialization: its guards and how it runs.

    ``run(args, kwargs)`` is a compiled graph (no break), a `Replay` of recorded segments (graph breaks), or ``None``
    (eagerly, ``break_reason`` says why).
    """

    guards: list
    run: object = None
    break_reason: str | None = None
    replay: Replay | None = None
    kernel_ops: list = field(default_factory=list)  # the forward's fused kernels
    backward_kernel_ops: list = field(default_factory=list)  # a training entry's backward kernels
    plan: object = None  # a training entry's TrainingPlan
    breaks: list = field(default_factory=list)  # the graph breaks recorded (segments.Break)
    trace_s: float = 0.0
    compile_s: float = 0.0
    dynamic: object = None  # a DynamicSpec: the entry stands for every size of its symbolic dimensions
    dynamic_reason: str | None = None  # why the sizes that changed stay specialized
    size_variant: bool = False  # a graph-broken entry at other sizes than another (not a recompile: see _call)
    graph_signature: tuple | None = None  # a whole graph's ops (stride_relayout.graph_signature)
    relayout: tuple = ()  # arguments copied to a dense layout per call: their guards accept its memory order
    relayout_refused: str | None = None  # why a stride-only miss of this entry compiles exact strides again
    writes_inputs: bool = False  # its graph writes into arguments (a copy of one would take the write instead)
    side_effects: str | None = None  # what Python state the call changes: it runs through its replay (side_effects.py)
    # Number arguments (number_inputs.py): the whole graph's `signature` and the numbers it was traced with, kept when
    # the call passed any, so a later call differing only in them can make them graph inputs; those it takes so.
    number_signature: list | None = field(default=None, repr=False)
    number_values: dict = field(default_factory=dict, repr=False)
    number_inputs: tuple = ()
    _key: list = field(default=None, repr=False)
    _key_of: list = field(default=None, repr=False)

    @property
    def key(self):
        """The guards' values, what a call's guard values are compared with (kept while ``guards`` is the same)."""
        if self._key_of is not self.guards:
            self._key, self._key_of = [v for _, v in self.guards], self.guards
        return self._key
