"""Second-order autograd as meta-learning code uses it: MAML on sine-wave regression (inner SGD steps through
torch.autograd.grad(create_graph=True) and torch.func.functional_call on a dict of fast weights, outer Adam
through the inner steps), Hessian-vector products (double backward and torch.autograd.functional.hvp), the exact
Hessian of a small loss (autograd.functional.hessian vs torch.func.hessian), a gradient penalty through
LayerNorm / softmax / tanh, and a few conjugate-gradient iterations on H v = g (the truncated-Newton step).

Deterministic: data and weights from NumPy; metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

rng = np.random.RandomState(0)
torch.set_default_dtype(torch.float64)  # second derivatives compared tightly


def sample_task():
    amp, phase = rng.uniform(0.5, 3.0), rng.uniform(0, np.pi)
    xs = rng.uniform(-5, 5, (20, 1))
    ys = amp * np.sin(xs + phase)
    return torch.from_numpy(xs[:10]), torch.from_numpy(ys[:10]), torch.from_numpy(xs[10:]), torch.from_numpy(ys[10:])


net = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.LayerNorm(32), nn.Tanh(), nn.Linear(32, 1))
init = np.random.RandomState(1)
with torch.no_grad():
    for p in net.parameters():
        p.copy_(torch.from_numpy(init.uniform(-0.5, 0.5, p.shape)))
meta_opt = torch.optim.Adam(net.parameters(), lr=1e-2)
inner_lr, inner_steps = 0.05, 2


def adapt(params, xs, ys, create_graph):
    for _ in range(inner_steps):
        loss = F.mse_loss(functional_call(net, params, (xs,)), ys)
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=create_graph)
        params = {n: p - inner_lr * g for (n, p), g in zip(params.items(), grads)}
    return params


meta_losses = []
for it in range(40):
    meta_opt.zero_grad()
    total = 0.0
    for _ in range(4):
        xs, ys, xq, yq = sample_task()
        fast = adapt(dict(net.named_parameters()), xs, ys, create_graph=True)
        qloss = F.mse_loss(functional_call(net, fast, (xq,)), yq)
        (qloss / 4).backward()
        total += qloss.item() / 4
    meta_opt.step()
    meta_losses.append(total)

# first-order vs second-order meta-gradient differ (the Hessian term matters)
xs, ys, xq, yq = sample_task()
params = dict(net.named_parameters())
fo = adapt(params, xs, ys, create_graph=False)
so = adapt(params, xs, ys, create_graph=True)
so_grad = torch.autograd.grad(F.mse_loss(functional_call(net, so, (xq,)), yq), list(params.values()))
fo_loss = F.mse_loss(functional_call(net, {n: p.detach().requires_grad_() for n, p in fo.items()}, (xq,)), yq)

# Hessian-vector products: double backward vs autograd.functional.hvp on flattened parameters
names = [n for n, _ in net.named_parameters()]
shapes = [p.shape for p in net.parameters()]
sizes = [p.numel() for p in net.parameters()]
flat0 = torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def loss_of_flat(flat):
    chunks = torch.split(flat, sizes)
    params = {n: c.view(s) for n, c, s in zip(names, chunks, shapes)}
    return F.mse_loss(functional_call(net, params, (xs,)), ys)


vec = torch.from_numpy(rng.randn(flat0.numel()))
w = flat0.clone().requires_grad_()
(g,) = torch.autograd.grad(loss_of_flat(w), w, create_graph=True)
(hv_double,) = torch.autograd.grad(g, w, grad_outputs=vec, retain_graph=True)
_, hv_functional = torch.autograd.functional.hvp(loss_of_flat, flat0, vec)

# conjugate gradient on (H + damping I) d = g for a few iterations
damping = 1.0
gvec = g.detach()
d = torch.zeros_like(gvec)
r = gvec.clone()
p_dir = r.clone()
for _ in range(5):
    (hp,) = torch.autograd.grad(g, w, grad_outputs=p_dir, retain_graph=True)
    hp = hp + damping * p_dir
    alpha = r.dot(r) / p_dir.dot(hp)
    d = d + alpha * p_dir
    r_new = r - alpha * hp
    beta = r_new.dot(r_new) / r.dot(r)
    p_dir, r = r_new + beta * p_dir, r_new

# exact Hessian of a small function: autograd.functional vs torch.func
lin = nn.Linear(3, 2)
with torch.no_grad():
    lin.weight.copy_(torch.from_numpy(rng.randn(2, 3)))
    lin.bias.copy_(torch.from_numpy(rng.randn(2)))
inp = torch.from_numpy(rng.randn(4, 3))


def small_loss(wt):
    return (torch.softmax(F.linear(inp, wt, lin.bias), dim=1)[:, 0] ** 2).sum() + wt.pow(3).sum()


H1 = torch.autograd.functional.hessian(small_loss, lin.weight.detach())
H2 = torch.func.hessian(small_loss)(lin.weight.detach())

# gradient penalty (WGAN-GP style) through LayerNorm, softmax and tanh
critic = nn.Sequential(nn.Linear(4, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 3))
with torch.no_grad():
    for p in critic.parameters():
        p.copy_(torch.from_numpy(rng.uniform(-0.5, 0.5, p.shape)))
real = torch.from_numpy(rng.randn(8, 4))
fake = torch.from_numpy(rng.randn(8, 4))
eps = torch.from_numpy(rng.rand(8, 1))
interp = (eps * real + (1 - eps) * fake).requires_grad_(True)
score = torch.softmax(critic(interp), 1)[:, 0].sum()
(gin,) = torch.autograd.grad(score, interp, create_graph=True)
penalty = ((gin.norm(2, dim=1) - 1) ** 2).mean()
penalty.backward()
critic_grad = torch.cat([p.grad.reshape(-1) for p in critic.parameters()])

print(f"initial_loss={np.mean(meta_losses[:8]):.8f}")  # averaged: each iteration draws new tasks
print(f"final_loss={np.mean(meta_losses[-8:]):.8f}")
print(f"meta_grad_norm={torch.cat([t.reshape(-1) for t in so_grad]).norm().item():.8f}")
print(f"first_order_query_loss={fo_loss.item():.8f}")
print(f"hvp_norm={hv_double.norm().item():.8f}")
print(f"hvp_agree={int((hv_double - hv_functional).abs().max().item() < 1e-10)}")
print(f"cg_step_norm={d.norm().item():.8f}")
print(f"cg_residual={r.norm().item():.8f}")
print(f"hessian_trace={H1.reshape(6, 6).trace().item():.8f}")
print(f"hessian_agree={int((H1 - H2).abs().max().item() < 1e-10)}")
print(f"penalty={penalty.item():.8f}")
print(f"critic_grad_norm={critic_grad.norm().item():.8f}")
