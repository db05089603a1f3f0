"""The errors ``jitorch.export`` raises, under torch's names.

- `UserError`: the call to ``export`` asks for something the program cannot give (``dynamic_shapes`` that name no
  argument, a dimension declared dynamic that the code specializes: torch's "Constraints violated").
- `GuardOnDataDependentSymNode`: Python control flow (or a host read) on a value computed from the inputs; the
  message names the user's line. It is a ``DataDependentOutputException`` (a ``RuntimeError``), as make_fx raises.

>>> raise UserError(UserErrorType.CONSTRAINT_VIOLATION, "Constraints violated (batch)!")
Traceback (most recent call last):
jitorch.export._errors.UserError: Constraints violated (batch)!
"""
from __future__ import annotations

import re
import traceback
from enum import Enum, auto

from ..fx._fake import DataDependentOutputException
from ..fx.proxy import user_frame as fx_user_frame

__all__ = ["UserError", "UserErrorType", "GuardOnDataDependentSymNode", "user_frame"]

class UserErrorType(Enum):
    DYNAMIC_CONTROL_FLOW = auto()
    ANTI_PATTERN = auto()
    STANDARD_LIBRARY = auto()
    CONSTRAINT_VIOLATION = auto()
    DYNAMIC_DIM = auto()
    INVALID_INPUT = auto()
    INVALID_OUTPUT = auto()
    UNSUPPORTED_FEATURE = auto()


class UserError(RuntimeError):
    """torch._dynamo.exc.UserError: the export call or the program cannot be exported as asked."""

    def __init__(self, error_type, msg, case_name=None):
        super().__init__(msg)
        self.error_type, self.message, self.case_name = error_type, msg, case_name


class GuardOnDataDependentSymNode(DataDependentOutputException):
    """Control flow on a value computed from the inputs met while exporting (``if x.sum() > 0``)."""


def user_frame(err):
    """The innermost frame outside jitorch where ``err`` was raised (the user's line), as a ``FrameSummary``."""
    tb = err.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    frame = fx_user_frame(tb.tb_frame)
    if frame is None:
        return None
    return traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def data_dependent(err):
    """``err`` (make_fx's refusal of a value read) as the `GuardOnDataDependentSymNode` export raises."""
    frame = user_frame(err)
    where = "" if frame is None else (f"\n\nThe following call raised this error:\n  File \"{frame.filename}\", "
                                      f"line {frame.lineno}, in {frame.name}\n    {frame.line}")
    reason = re.sub(r" at \S+:\d+$", "", str(err).split(": ", 1)[-1].split("; the graph would keep")[0])
    return GuardOnDataDependentSymNode(
        f"Could not guard on data-dependent expression: {reason}. An exported graph cannot branch on the values "
        f"of its inputs (it would keep the branch the example inputs took).{where}\n\nWrite the choice with tensor "
        "ops (torch.where, masks) or move it out of the exported module.")
