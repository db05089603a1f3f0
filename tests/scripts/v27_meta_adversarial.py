"""Research utilities around torch.func and autograd: MAML (second-order, torch.func.functional_call with
create_graph), per-sample gradient norms with vmap(grad), FGSM and PGD adversarial examples with an L-inf ball,
TRADES-style KL robustness loss, and the usual boilerplate (device selection, torch.backends flags, deterministic
algorithms, torch.compile of the model).

Weights and data come from NumPy, so every printed metric is the same under every backend.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
torch.use_deterministic_algorithms(True)
torch.set_float32_matmul_precision("high")
rng = np.random.default_rng(21)


def numpy_init(module, seed, scale=0.3):
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.from_numpy(g.normal(scale=scale, size=tuple(p.shape)).astype(np.float32)))
    return module.to(device)


# MAML on sine regression tasks.
def sine_task(n):
    amp, phase = rng.uniform(0.5, 2.0), rng.uniform(0, np.pi)
    x = rng.uniform(-5, 5, size=(2 * n, 1)).astype(np.float32)
    y = (amp * np.sin(x + phase)).astype(np.float32)
    t = [torch.from_numpy(a).to(device, non_blocking=True) for a in (x[:n], y[:n], x[n:], y[n:])]
    return t


net = numpy_init(nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)), 0)
meta_opt = torch.optim.Adam(net.parameters(), lr=1e-3)
inner_lr = 0.01
tasks = [sine_task(10) for _ in range(40)]


def adapted_query_loss(task, steps=1):
    xs, ys, xq, yq = task
    params = dict(net.named_parameters())
    for _ in range(steps):
        loss = F.mse_loss(functional_call(net, params, (xs,)), ys)
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
        params = {name: p - inner_lr * g for (name, p), g in zip(params.items(), grads)}
    return F.mse_loss(functional_call(net, params, (xq,)), yq)


with torch.no_grad():
    initial = float(np.mean([F.mse_loss(net(t[2]), t[3]).item() for t in tasks]))
history = []
for it in range(10):
    meta_opt.zero_grad()
    batch = tasks[4 * it:4 * it + 4]
    meta_loss = torch.stack([adapted_query_loss(t) for t in batch]).mean()
    meta_loss.backward()
    meta_opt.step()
    history.append(meta_loss.item())
print(f"initial_loss={initial:.6f}")
print(f"maml_first={history[0]:.6f}")
print(f"final_loss={history[-1]:.6f}")
print(f"maml_grad_norm={torch.cat([p.grad.flatten() for p in net.parameters()]).norm().item():.6f}")

# Per-sample gradient norms (DP-SGD style) with vmap over grad of a functional loss.
clf = numpy_init(nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3)), 1)
X = torch.from_numpy(rng.normal(size=(32, 6)).astype(np.float32))
Y = torch.from_numpy(rng.integers(0, 3, 32))
params = {k: v.detach() for k, v in clf.named_parameters()}


def sample_loss(p, x, y):
    return F.cross_entropy(functional_call(clf, p, (x.unsqueeze(0),)), y.unsqueeze(0))


per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, X, Y)
norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_sample.values()))
clip = (1.0 / (norms + 1e-6)).clamp(max=1.0)
clipped_mean = {k: (g * clip.view(-1, *([1] * (g.dim() - 1)))).mean(0) for k, g in per_sample.items()}
full = torch.autograd.grad(F.cross_entropy(clf(X), Y), list(clf.parameters()))
print(f"per_sample_norm_max={norms.max().item():.6f}")
mean_matches = all(torch.allclose(per_sample[k].mean(0), g, atol=1e-6) for k, g in zip(params, full))
print(f"per_sample_mean_matches={float(mean_matches):.1f}")
print(f"dp_clipped_norm={torch.cat([g.flatten() for g in clipped_mean.values()]).norm().item():.6f}")

# Adversarial examples against the classifier.
eps, alpha = 0.3, 0.05
x = X.clone().requires_grad_(True)
F.cross_entropy(clf(x), Y).backward()
x_fgsm = (X + eps * x.grad.sign()).detach()
x_adv = X + torch.empty_like(X).uniform_(-eps, eps) * 0  # start at X: deterministic
for _ in range(7):
    x_adv.requires_grad_(True)
    loss = F.cross_entropy(clf(x_adv), Y)
    (g,) = torch.autograd.grad(loss, [x_adv])
    x_adv = x_adv.detach() + alpha * g.sign()
    x_adv = torch.min(torch.max(x_adv, X - eps), X + eps).clamp(-4, 4)
with torch.no_grad():
    acc = lambda inp: (clf(inp).argmax(1) == Y).float().mean().item()  # noqa: E731
    print(f"clean_acc={acc(X):.6f}")
    print(f"fgsm_acc={acc(x_fgsm):.6f}")
    print(f"pgd_acc={acc(x_adv):.6f}")
    print(f"pgd_linf={(x_adv - X).abs().max().item():.6f}")
    trades = F.kl_div(F.log_softmax(clf(x_adv), 1), F.softmax(clf(X), 1), reduction="batchmean")
    print(f"trades_kl={trades.item():.6f}")

# torch.compile of the classifier (the inductor path in torch): same values as eager.
compiled = torch.compile(clf)
with torch.no_grad():
    eager_out = clf(X)
    comp_out = compiled(X)
print(f"compile_matches={float(torch.allclose(eager_out, comp_out, atol=1e-5)):.1f}")
opt = torch.optim.SGD(clf.parameters(), lr=0.1)
for _ in range(5):
    opt.zero_grad()
    loss = F.cross_entropy(compiled(X), Y)
    loss.backward()
    opt.step()
print(f"compiled_train_loss={loss.item():.6f}")
