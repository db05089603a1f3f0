"""The main demo: fit a cubic to sin(x) with jitorch tensors and autograd (``python -m jitorch.demo``).

It uses only the PyTorch API, through ``import jitorch as torch``, the way the PyTorch tutorials write it.
"""
from __future__ import annotations

import math
import time


def main(steps: int = 2000) -> float:
    import jitorch as torch

    torch.manual_seed(0)
    x = torch.linspace(-math.pi, math.pi, 2000)
    y = torch.sin(x)
    coeffs = torch.randn(4, requires_grad=True)
    powers = torch.stack([x ** 0, x, x ** 2, x ** 3], dim=1)
    lr = 1e-6
    start = time.perf_counter()
    for step in range(steps):
        y_pred = powers @ coeffs if hasattr(torch.Tensor, "__matmul__") else (powers * coeffs).sum(1)
        loss = ((y_pred - y) ** 2).sum()
        if step % 400 == 0:
            print(f"step {step:5d}  loss {loss.item():12.4f}")
        loss.backward()
        with torch.no_grad():
            coeffs -= lr * coeffs.grad
            coeffs.grad = None
    elapsed = time.perf_counter() - start
    a, b, c, d = coeffs.tolist()
    print(f"final loss {loss.item():.4f} after {steps} steps in {elapsed:.2f} s ({elapsed / steps * 1e6:.0f} us/step)")
    print(f"y = {a:.4f} + {b:.4f} x + {c:.4f} x^2 + {d:.4f} x^3")
    return loss.item()


if __name__ == "__main__":
    main()
