"""torch.func and torch.autograd.functional as optimisation / implicit-layer code uses them: Gauss-Newton and
Levenberg-Marquardt fitting of a nonlinear curve with jacrev(has_aux=True) over functional_call, Newton's method
with torch.func.hessian, jvp / vjp / linearize for directional derivatives, vmap with in_dims=(None, 0) and
chunk_size, per-example Jacobian norms of an MLP (vmap(jacfwd)), Hessian-vector products three ways
(autograd.functional.hvp, double backward, jvp of grad), torch.autograd.functional.jacobian(vectorize=True) and
hessian(create_graph=False), an implicit-function-theorem gradient through a fixed point (a DEQ-style layer
solved by iteration, then its backward solved with torch.linalg.solve on the Jacobian), and torch.func.grad_and_value.

All inputs from NumPy, float64: every metric must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import functional as AF
from torch.func import functional_call, grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize, vjp, vmap

torch.set_default_dtype(torch.float64)
rng = np.random.RandomState(0)
t = torch.linspace(0, 4, 40)
y = 2.0 * torch.exp(-0.7 * t) * torch.cos(3.0 * t + 0.3) + torch.tensor(0.02 * rng.randn(40))


def model(theta, t):
    a, k, w, phi = theta
    return a * torch.exp(-k * t) * torch.cos(w * t + phi)


def residuals(theta):
    r = model(theta, t) - y
    return r, (r.detach(), (r ** 2).sum().detach())  # (output, aux) for jacrev(has_aux=True)


theta = torch.tensor([1.5, 0.5, 2.8, 0.0])
lam = 1e-2
lm_costs = []
for it in range(15):
    J, (r, cost) = jacrev(residuals, has_aux=True)(theta)
    A = J.T @ J + lam * torch.diag(torch.diagonal(J.T @ J))
    step = torch.linalg.solve(A, -J.T @ r)
    new_cost = residuals(theta + step)[1][1]
    if new_cost < cost:
        theta, lam = theta + step, lam * 0.3
    else:
        lam *= 10
    lm_costs.append(cost.item())

# Newton on a smooth convex function with torch.func.hessian.
Q = torch.tensor(rng.randn(5, 5))
Q = Q @ Q.T + torch.eye(5)


def f(x):
    return 0.5 * x @ Q @ x + torch.log(torch.exp(x).sum()) - x.sum()


x = torch.zeros(5)
for _ in range(6):
    g_val, val = grad_and_value(f)(x)
    x = x - torch.linalg.solve(hessian(f)(x), g_val)
newton_grad = grad(f)(x).norm().item()

# Directional derivatives.
v = torch.tensor(rng.randn(5))
_, jvp_out = jvp(f, (x + 1,), (v,))
_, vjp_fn = vjp(lambda z: torch.sin(z) * z, x + 1)
(vjp_out,) = vjp_fn(v)
_, lin = linearize(lambda z: torch.tanh(z).sum() * z, x + 1)

# MLP per-example Jacobian norms and Hessian-vector products.
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))
params = {k: v.detach() for k, v in net.named_parameters()}
xs = torch.tensor(rng.randn(10, 3))
per_ex = vmap(jacfwd(lambda p, xi: functional_call(net, p, (xi,))), in_dims=(None, 0), chunk_size=4)(params, xs)
jac_norm = sum(j.pow(2).sum() for j in per_ex.values()).sqrt().item()
in_jac = vmap(jacrev(lambda xi: net(xi)))(xs)


def loss_fn(w):
    return (torch.tanh(xs @ w) ** 2).sum()


w0 = torch.tensor(rng.randn(3))
vec = torch.tensor(rng.randn(3))
_, hvp1 = AF.hvp(loss_fn, w0, vec)
w_req = w0.clone().requires_grad_()
(g1,) = torch.autograd.grad(loss_fn(w_req), w_req, create_graph=True)
(hvp2,) = torch.autograd.grad(g1 @ vec, w_req)
_, hvp3 = jvp(grad(loss_fn), (w0,), (vec,))
J_full = AF.jacobian(lambda w: torch.tanh(xs @ w), w0, vectorize=True)
H_full = AF.hessian(loss_fn, w0)

# Implicit differentiation through a fixed point z* = tanh(W z* + U x).
W = torch.tensor(0.3 * rng.randn(4, 4), requires_grad=True)
U = torch.tensor(rng.randn(4, 2))
xin = torch.tensor(rng.randn(2))
with torch.no_grad():
    z = torch.zeros(4)
    for _ in range(100):
        z = torch.tanh(W @ z + U @ xin)
z = z.requires_grad_()
fz = torch.tanh(W @ z + U @ xin)
Jz = AF.jacobian(lambda zz: torch.tanh(W.detach() @ zz + U @ xin), z.detach())
upstream = torch.ones(4)
adj = torch.linalg.solve((torch.eye(4) - Jz).T, upstream)
(implicit_gW,) = torch.autograd.grad(fz, W, grad_outputs=adj)
W_unrolled = W.detach().clone().requires_grad_()
zu = torch.zeros(4)
for _ in range(100):
    zu = torch.tanh(W_unrolled @ zu + U @ xin)
zu.sum().backward()
print(f"initial_loss={lm_costs[0]:.10f}")
print(f"final_loss={lm_costs[-1]:.10f}")
print(f"theta_k={theta[1].item():.10f}")
print(f"theta_w={theta[2].item():.10f}")
print(f"newton_ok={float(newton_grad < 1e-10)}")
print(f"newton_x0={x[0].item():.10f}")
print(f"jvp={jvp_out.item():.10f}")
print(f"vjp_sum={vjp_out.sum().item():.10f}")
print(f"lin_sum={lin(v).sum().item():.10f}")
print(f"jac_norm={jac_norm:.10f}")
print(f"in_jac_sum={in_jac.sum().item():.10f}")
print(f"hvp_agree={float(torch.allclose(hvp1, hvp2) and torch.allclose(hvp2, hvp3))}")
print(f"hvp_sum={hvp1.sum().item():.10f}")
print(f"jac_full_sum={J_full.sum().item():.10f}")
print(f"hess_trace={torch.trace(H_full).item():.10f}")
print(f"implicit_vs_unrolled={float(torch.allclose(implicit_gW, W_unrolled.grad, atol=1e-8))}")
print(f"implicit_gW_sum={implicit_gW.sum().item():.10f}")
