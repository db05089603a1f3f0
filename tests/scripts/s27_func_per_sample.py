"""torch.func as DP-SGD and scientific-ML code uses it: per-sample gradients with vmap(grad(...)) over
functional_call (checked against a loop of backward calls), per-sample gradient clipping and noise-free DP-SGD
steps, Jacobians by jacrev/jacfwd and vmap over a batch, a jvp/vjp pair, stacked model ensembles through
stack_module_state + vmap, and a physics-informed loss with d/dx and d2/dx2 of a network taken by nested grad.

Deterministic: data and weights from NumPy; metrics must match torch.
"""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, grad_and_value, jacfwd, jacrev, jvp, stack_module_state, vjp, vmap

rng = np.random.RandomState(0)


def numpy_init(module, seed, scale=0.4):
    r = np.random.RandomState(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.from_numpy(r.uniform(-scale, scale, p.shape).astype(np.float32)))
    return module


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


model = numpy_init(MLP(), 1)
X = torch.from_numpy(rng.randn(64, 6).astype(np.float32))
Y = torch.from_numpy((X.numpy() @ rng.randn(6, 3)).argmax(1))


def loss_fn(params, buffers, x, y):
    logits = functional_call(model, (params, buffers), (x.unsqueeze(0),))
    return F.cross_entropy(logits, y.unsqueeze(0))


params = {k: v.detach() for k, v in model.named_parameters()}
buffers = {k: v.detach() for k, v in model.named_buffers()}
ps_grads = vmap(grad(loss_fn), in_dims=(None, None, 0, 0))(params, buffers, X[:8], Y[:8])
loop_err = 0.0
for i in range(8):
    model.zero_grad()
    F.cross_entropy(model(X[i:i + 1]), Y[i:i + 1]).backward()
    for k, p in model.named_parameters():
        loop_err = max(loop_err, (p.grad - ps_grads[k][i]).abs().max().item())

# DP-SGD (without noise, to stay deterministic): clip each example's gradient to norm C, average, step
C, lr = 0.5, 0.5
dp_losses = []
for step in range(40):
    idx = rng.choice(64, 16, replace=False)
    xb, yb = X[idx], Y[idx]
    g, losses = vmap(grad_and_value(loss_fn), in_dims=(None, None, 0, 0))(params, buffers, xb, yb)
    norms = torch.stack([g[k].flatten(1).norm(dim=1) for k in g], 1).norm(dim=1)
    factor = (C / (norms + 1e-6)).clamp(max=1.0)
    params = {k: params[k] - lr * torch.einsum("b,b...->...", factor, g[k]) / len(idx) for k in params}
    dp_losses.append(losses.mean().item())
dp_acc = (functional_call(model, params, (X,)).argmax(1) == Y).float().mean().item()

# Jacobians of the network output w.r.t. the input, per example
f = lambda x: functional_call(model, params, (x,))  # noqa: E731
J_rev = vmap(jacrev(f))(X[:5])
J_fwd = vmap(jacfwd(f))(X[:5])
J_loop = torch.stack([torch.autograd.functional.jacobian(f, X[i]) for i in range(5)])
tangent = torch.from_numpy(rng.randn(6).astype(np.float32))
out, jv = jvp(f, (X[0],), (tangent,))
out2, vjp_fn = vjp(f, X[0])
(vj,) = vjp_fn(torch.ones(3))

# an ensemble of 4 models evaluated at once
ensemble = [numpy_init(copy.deepcopy(model), 10 + i) for i in range(4)]
e_params, e_buffers = stack_module_state(ensemble)
base = copy.deepcopy(ensemble[0]).to("meta")
ens_out = vmap(lambda p, b, x: functional_call(base, (p, b), (x,)), in_dims=(0, 0, None))(e_params, e_buffers, X[:10])
ens_loop = torch.stack([m(X[:10]) for m in ensemble])

# physics-informed net: u'' + u = 0 on [0, pi], u(0)=0, u'(0)=1 (solution sin x)
pinn = nn.Sequential(nn.Linear(1, 20), nn.Tanh(), nn.Linear(20, 20), nn.Tanh(), nn.Linear(20, 1))
numpy_init(pinn, 5, 0.8)
u = lambda p, x: functional_call(pinn, p, (x.reshape(1, 1),)).squeeze()  # noqa: E731
du = grad(u, argnums=1)
d2u = grad(du, argnums=1)
xs = torch.linspace(0, 3.14159, 24)
popt = torch.optim.Adam(pinn.parameters(), lr=0.01)
pinn_losses = []
for step in range(60):
    p = dict(pinn.named_parameters())
    residual = vmap(d2u, in_dims=(None, 0))(p, xs) + vmap(u, in_dims=(None, 0))(p, xs)
    x0 = torch.zeros(())
    loss = residual.pow(2).mean() + u(p, x0).pow(2) + (du(p, x0) - 1).pow(2)
    popt.zero_grad()
    loss.backward()
    popt.step()
    pinn_losses.append(loss.item())

print(f"per_sample_loop_err_ok={int(loop_err < 1e-5)}")
print(f"per_sample_grad_norm={torch.cat([v.flatten() for v in ps_grads.values()]).norm().item():.6f}")
print(f"initial_loss={dp_losses[0]:.6f}")
print(f"final_loss={dp_losses[-1]:.6f}")
print(f"dp_accuracy={dp_acc:.6f}")
print(f"jac_norm={J_rev.norm().item():.6f}")
print(f"jac_agree={int(max((J_rev - J_fwd).abs().max().item(), (J_rev - J_loop).abs().max().item()) < 1e-5)}")
print(f"jvp={jv.sum().item():.6f}")
print(f"vjp={vj.sum().item():.6f}")
print(f"ensemble_sum={ens_out.sum().item():.6f}")
print(f"ensemble_agree={int((ens_out - ens_loop).abs().max().item() < 1e-5)}")
print(f"pinn_initial_loss={pinn_losses[0]:.6f}")
print(f"pinn_final_loss={pinn_losses[-1]:.6f}")
