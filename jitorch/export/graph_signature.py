"""``torch.export.graph_signature``: what each input and output of an exported graph is.

An exported graph is functional: parameters, buffers and constant tensors come in as placeholders ahead of the
user's inputs, and the new values of the buffers (and inputs) it writes go out ahead of the user's outputs. The
signature lists them in order (`InputSpec`, `OutputSpec`), with torch's kinds, argument names and targets (the
fully qualified names of the module's parameters and buffers).

>>> sig = ExportGraphSignature(
...     [InputSpec(InputKind.PARAMETER, TensorArgument("p_fc_weight"), "fc.weight"),
...      InputSpec(InputKind.BUFFER, TensorArgument("b_steps"), "steps", persistent=True),
...      InputSpec(InputKind.USER_INPUT, TensorArgument("x"), None)],
...     [OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument("add"), "steps"),
...      OutputSpec(OutputKind.USER_OUTPUT, TensorArgument("linear"), None)])
>>> print(sig)
<BLANKLINE>
# inputs
p_fc_weight: PARAMETER target='fc.weight'
b_steps: BUFFER target='steps' persistent=True
x: USER_INPUT
<BLANKLINE>
# outputs
add: BUFFER_MUTATION target='steps'
linear: USER_OUTPUT
<BLANKLINE>
>>> sig.parameters, sig.buffers_to_mutate, sig.user_inputs
(('fc.weight',), {'add': 'steps'}, ('x',))
"""
from __future__ import annotations

import dataclasses
from enum import Enum, auto
from typing import Any

__all__ = ["InputKind", "OutputKind", "TensorArgument", "SymIntArgument", "ConstantArgument", "InputSpec",
           "OutputSpec", "ExportGraphSignature", "ExportBackwardSignature"]


class InputKind(Enum):
    USER_INPUT = auto()
    PARAMETER = auto()
    BUFFER = auto()
    CONSTANT_TENSOR = auto()
    CUSTOM_OBJ = auto()
    TOKEN = auto()


class OutputKind(Enum):
    USER_OUTPUT = auto()
    LOSS_OUTPUT = auto()
    BUFFER_MUTATION = auto()
    PARAMETER_MUTATION = auto()
    GRADIENT_TO_PARAMETER = auto()
    GRADIENT_TO_USER_INPUT = auto()
    USER_INPUT_MUTATION = auto()
    TOKEN = auto()


@dataclasses.dataclass
class TensorArgument:
    name: str


@dataclasses.dataclass
class SymIntArgument:
    name: str


@dataclasses.dataclass
class ConstantArgument:
    name: str
    value: Any


_ARGUMENTS = (TensorArgument, SymIntArgument, ConstantArgument)


@dataclasses.dataclass
class InputSpec:
    kind: InputKind
    arg: Any
    target: str | None
    persistent: bool | None = None

    def __post_init__(self):
        if self.kind == InputKind.BUFFER and self.persistent is None:
            raise AssertionError("Failed to specify persistent flag on BUFFER.")
        if not isinstance(self.arg, _ARGUMENTS):
            raise AssertionError(f"expected valid arg type, got {type(self.arg)}")

    def __str__(self):
        target = "" if self.target is None else f" target='{self.target}'"
        persistent = "" if self.persistent is None else f" persistent={self.persistent}"
        return f"{self.arg.name}: {self.kind.name}{target}{persistent}"


@dataclasses.dataclass
class OutputSpec:
    kind: OutputKind
    arg: Any
    target: str | None

    def __post_init__(self):
        if not isinstance(self.arg, _ARGUMENTS):
            raise AssertionError(f"expected valid arg type, got {self.arg}")

    def __str__(self):
        target = "" if self.target is None else f" target='{self.target}'"
        return f"{self.arg.name}: {self.kind.name}{target}"


@dataclasses.dataclass
class ExportBackwardSignature:
    gradients_to_parameters: dict
    gradients_to_user_inputs: dict
    loss_output: str


def _value(arg):
    return arg.value if isinstance(arg, ConstantArgument) else arg.name


@dataclasses.dataclass
class ExportGraphSignature:
    """The inputs and outputs of an exported graph, in the graph's order, as torch's ``ExportGraphSignature``."""

    input_specs: list
    output_specs: list

    def _targets(self, specs, kind, persistent=None):
        return tuple(s.target for s in specs if s.kind == kind and isinstance(s.target, str)
                     and (persistent is None or s.persistent is persistent))

    def _names(self, specs, kind):
        return {s.arg.name: s.target for s in specs if s.kind == kind and isinstance(s.arg, TensorArgument)
                and isinstance(s.target, str)}

    @property
    def parameters(self):
        return self._targets(self.input_specs, InputKind.PARAMETER)

    @property
    def buffers(self):
        return self._targets(self.input_specs, InputKind.BUFFER)

    @property
    def non_persistent_buffers(self):
        return self._targets(self.input_specs, InputKind.BUFFER, persistent=False)

    @property
    def lifted_tensor_constants(self):
        return self._targets(self.input_specs, InputKind.CONSTANT_TENSOR)

    @property
    def lifted_custom_objs(self):
        return ()

    @property
    def user_inputs(self):
        return tuple(_value(s.arg) for s in self.input_specs if s.kind == InputKind.USER_INPUT)

    @property
    def user_outputs(self):
        return tuple(_value(s.arg) for s in self.output_specs
                     if s.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT))

    @property
    def inputs_to_parameters(self):
        return self._names(self.input_specs, InputKind.PARAMETER)

    @property
    def inputs_to_buffers(self):
        return self._names(self.input_specs, InputKind.BUFFER)

    @property
    def inputs_to_lifted_tensor_constants(self):
        return self._names(self.input_specs, InputKind.CONSTANT_TENSOR)

    @property
    def buffers_to_mutate(self):
        return self._names(self.output_specs, OutputKind.BUFFER_MUTATION)

    @property
    def parameters_to_mutate(self):
        return self._names(self.output_specs, OutputKind.PARAMETER_MUTATION)

    @property
    def user_inputs_to_mutate(self):
        return self._names(self.output_specs, OutputKind.USER_INPUT_MUTATION)

    @property
    def backward_signature(self):
        return None

    @property
    def assertion_dep_token(self):
        return None

    @property
    def input_tokens(self):
        return ()

    @property
    def output_tokens(self):
        return ()

    def __str__(self):
        inputs = "\n".join(str(s) for s in self.input_specs)
        outputs = "\n".join(str(s) for s in self.output_specs)
        return f"\n# inputs\n{inputs}\n\n# outputs\n{outputs}\n"
