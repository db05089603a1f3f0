"""``jitorch.amp.GradScaler``: dynamic loss scaling for mixed-precision training, step for step like torch's.

``GradScaler("cuda")`` on a machine without CUDA warns and disables itself exactly as torch does: ``scale`` returns
its input, ``step`` just calls ``optimizer.step()``, ``update`` does nothing. ``GradScaler("cpu")`` does the real
work: multiply the loss by the scale, unscale the gradients and look for inf/NaN, skip the step when any are found,
then back the scale off (or grow it after ``growth_interval`` clean steps).

>>> import jitorch
>>> from jitorch.amp import GradScaler
>>> scaler = GradScaler("cpu", init_scale=4.0)
>>> w = jitorch.nn.Parameter(jitorch.tensor([1.0]))
>>> opt = jitorch.optim.SGD([w], lr=0.1)
>>> scaler.scale((w * 3).sum()).backward()
>>> w.grad
tensor([12.])
>>> scaler.step(opt); scaler.update(); w.grad, scaler.get_scale()
(tensor([3.]), 4.0)
"""
from __future__ import annotations

import warnings
from collections import abc, defaultdict
from enum import Enum

__all__ = ["GradScaler", "OptState"]


class OptState(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state():
    return {"stage": OptState.READY, "found_inf_per_device": {}}


class GradScaler:
    """``GradScaler(device="cuda", init_scale=2.**16, growth_factor=2., backoff_factor=.5, growth_interval=2000,
    enabled=True)``."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:
        from ..runtime import cuda_available

        self._device = device
        self._enabled = enabled
        if device == "cuda" and enabled and not cuda_available():
            # torch's text, including its double space, so logs and warning filters match.
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                          stacklevel=2)
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
            self._init_scale = init_scale
            self._scale = None
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker = None
            self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _check_scale_growth_tracker(self, funcname):
        fix = "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration."
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  " + fix)
        if self._growth_tracker is None:
            raise AssertionError(f"Attempted {funcname} but _growth_tracker is None.  " + fix)
        return self._scale, self._growth_tracker

    def _lazy_init_scale_growth_tracker(self, dev):
        import jitorch

        self._scale = jitorch.full((), self._init_scale, dtype=jitorch.float32, device=dev)
        self._growth_tracker = jitorch.full((), self._init_growth_tracker, dtype=jitorch.int32, device=dev)

    def scale(self, outputs):
        """Multiply a tensor (or a nested list/tuple/iterable of tensors) by the current scale."""
        import jitorch

        if not self._enabled:
            return outputs

        def apply_scale(val):
            if isinstance(val, jitorch.Tensor):
                if self._scale is None:
                    self._lazy_init_scale_growth_tracker(val.device)
                return val * self._scale.to(val.device)
            if isinstance(val, abc.Iterable):
                scaled = map(apply_scale, val)
                return type(val)(scaled) if isinstance(val, (list, tuple)) else scaled
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply_scale(outputs)

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        """Multiply every gradient by ``inv_scale``; record per device whether any was inf/NaN."""
        import jitorch

        per_device_found_inf = {}
        with jitorch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    grad = param.grad
                    if (not allow_fp16) and grad.dtype == jitorch.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    if grad.is_sparse:  # sparse=True embeddings: the values scale in place, as torch's
                        if grad.dtype == jitorch.float16:
                            param.grad = grad = grad.coalesce()  # a float16 sum of duplicates could overflow
                        grad = grad._values()
                    dev = grad.device
                    flag = per_device_found_inf.get(dev)
                    if flag is None:
                        flag = per_device_found_inf[dev] = found_inf.to(dev).clone()
                    # torch's kernel scales every gradient, finite or not, and only flags the non-finite ones.
                    if not bool(jitorch.isfinite(grad).all()):
                        flag.fill_(1.0)
                    grad.mul_(inv_scale.to(dev))
        return per_device_found_inf

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale (e.g. before clipping); at most once per ``update``."""
        import jitorch

        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # The reciprocal in double, then rounded once to float32, as torch does.
        inv_scale = self._scale.double().reciprocal().float()
        found_inf = jitorch.full((), 0.0, dtype=jitorch.float32, device=self._scale.device)
        optimizer_state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
        optimizer_state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale (if not done yet) and call ``optimizer.step()`` unless a gradient was inf/NaN; returns its result."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if optimizer_state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if len(optimizer_state["found_inf_per_device"]) == 0:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        retval = None
        if not sum(v.item() for v in optimizer_state["found_inf_per_device"].values()):
            retval = optimizer.step(*args, **kwargs)
        optimizer_state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale=None) -> None:
        """Back off the scale after an inf/NaN step, grow it after ``growth_interval`` clean ones, or set it."""
        import jitorch

        if not self._enabled:
            return
        _scale, _growth_tracker = self._check_scale_growth_tracker("update")
        if new_scale is not None:
            if isinstance(new_scale, float):
                self._scale.fill_(new_scale)
            else:
                reason = ("new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                          "torch.FloatTensor with requires_grad=False.")
                if new_scale.device.type != self._device or new_scale.numel() != 1 or new_scale.requires_grad:
                    raise AssertionError(reason)
                self._scale.copy_(new_scale.reshape(()))
        else:
            found_infs = [found_inf.to(_scale.device) for state in self._per_optimizer_states.values()
                          for found_inf in state["found_inf_per_device"].values()]
            if len(found_infs) == 0:
                raise AssertionError("No inf checks were recorded prior to update.")
            self._update_scale(sum(float(f.item()) for f in found_infs) > 0, jitorch)
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _update_scale(self, found_inf: bool, jitorch) -> None:
        # torch._amp_update_scale_: products taken in double and rounded to float32; a growth that would overflow
        # to inf leaves the scale unchanged (the tracker still resets).
        import numpy as np

        scale, tracker = float(self._scale.item()), int(self._growth_tracker.item())
        if found_inf:
            scale, tracker = float(np.float32(scale * self._backoff_factor)), 0
        elif tracker + 1 == self._growth_interval:
            grown = np.float32(scale * self._growth_factor)
            scale, tracker = (float(grown) if np.isfinite(grown) else scale), 0
        else:
            tracker += 1
        self._scale.fill_(scale)
        self._growth_tracker.fill_(tracker)

    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled; ``init_scale`` before the first ``scale``)."""
        if self._enabled:
            return self._init_scale if self._scale is None else float(self._scale.item())
        return 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        if self._enabled:
            return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker.item())
        return 0

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        """scale, growth/backoff factors, growth interval and ``_growth_tracker``; ``{}`` if disabled."""
        if self._enabled:
            return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                    "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                    "_growth_tracker": self._get_growth_tracker()}
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        if self._scale is not None:
            self._scale.fill_(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._growth_tracker is not None:
            self._growth_tracker.fill_(state_dict["_growth_tracker"])

    def __getstate__(self):
        state = self.__dict__.copy()
        if self._enabled:
            # Like torch: pickle before any scaling happened, so the copy starts from the current figures.
            if len(self._per_optimizer_states) != 0:
                raise AssertionError("A GradScaler instance may only be pickled at the beginning of an iteration, or "
                                     "at the end after scaler.update().")
            state["_init_scale"] = self.get_scale()
            state["_init_growth_tracker"] = self._get_growth_tracker()
            state["_scale"] = None
            state["_growth_tracker"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
