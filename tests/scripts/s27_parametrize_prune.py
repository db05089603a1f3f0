"""Weight reparametrizations and pruning as model-compression and stable-training code uses them: an MLP with
parametrizations.weight_norm, spectral_norm (power iteration with a NumPy-made u/v, eval-mode freeze) and
orthogonal (matrix_exp / cayley / householder) layers, a custom parametrization registered with
register_parametrization (symmetric matrices, right_inverse), cached() evaluation, remove_parametrizations
(leave_parametrized), then iterative magnitude pruning with prune.l1_unstructured / ln_structured /
global_unstructured and random-free custom_from_mask, fine-tuning with the masks applied, and prune.remove.

Deterministic: data, weights and power-iteration vectors from NumPy; metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize
from torch.nn.utils import parametrizations, prune

rng = np.random.RandomState(0)
X = torch.from_numpy(rng.randn(128, 10).astype(np.float32))
Y = torch.from_numpy((np.sin(X.numpy() @ rng.randn(10, 4)) > 0).astype(np.float32))


def numpy_init(module, seed):
    r = np.random.RandomState(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.from_numpy(r.uniform(-0.4, 0.4, p.shape).astype(np.float32)))


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)

    def right_inverse(self, A):
        return A.triu()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 16)
        self.fc4 = nn.Linear(16, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = torch.tanh(self.fc3(x))
        x = F.relu(self.fc4(x))
        return self.out(x)


net = Net()
numpy_init(net, 1)
parametrizations.weight_norm(net.fc1, name="weight", dim=0)
parametrizations.spectral_norm(net.fc2, n_power_iterations=2)
# deterministic power-iteration start vectors
with torch.no_grad():
    sn = net.fc2.parametrizations.weight[0]
    sn._u.copy_(F.normalize(torch.from_numpy(rng.randn(16).astype(np.float32)), dim=0))
    sn._v.copy_(F.normalize(torch.from_numpy(rng.randn(16).astype(np.float32)), dim=0))
parametrizations.orthogonal(net.fc3, orthogonal_map="matrix_exp")
parametrize.register_parametrization(net.fc4, "weight", Symmetric())
assert parametrize.is_parametrized(net.fc4, "weight")
orig_names = sorted(n for n, _ in net.named_parameters())
print("params:", orig_names)

opt = torch.optim.Adam(net.parameters(), lr=0.01)
losses = []
for step in range(60):
    net.train()
    loss = F.binary_cross_entropy_with_logits(net(X), Y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())

net.eval()
with torch.no_grad(), parametrize.cached():
    logits = net(X)
    acc_param = ((logits > 0).float() == Y).float().mean().item()
    sigma = torch.linalg.matrix_norm(net.fc2.weight, ord=2).item()
    ortho_err = (net.fc3.weight @ net.fc3.weight.T - torch.eye(16)).abs().max().item()
    sym_err = (net.fc4.weight - net.fc4.weight.T).abs().max().item()
    wn_g = net.fc1.parametrizations.weight.original0.norm().item()

for layer in (net.fc1, net.fc2, net.fc3, net.fc4):
    parametrize.remove_parametrizations(layer, "weight", leave_parametrized=True)
with torch.no_grad():
    removed_gap = (net(X) - logits).abs().max().item()

# other orthogonal maps on a square and a wide matrix
ortho_norms = []
for m, shape in (("cayley", (6, 6)), ("householder", (4, 7))):
    lin = nn.Linear(shape[1], shape[0], bias=False)
    numpy_init(lin, 3)
    parametrizations.orthogonal(lin, orthogonal_map=m)
    w = lin.weight
    ortho_norms.append((w @ w.T - torch.eye(shape[0])).abs().max().item())
    (w.sum() * 2).backward()
    ortho_norms.append(lin.parametrizations.weight.original.grad.norm().item())

# iterative magnitude pruning + fine-tuning
prune.l1_unstructured(net.fc1, name="weight", amount=0.3)
prune.ln_structured(net.fc2, name="weight", amount=0.25, n=2, dim=0)
prune.global_unstructured([(net.fc3, "weight"), (net.fc4, "weight")], pruning_method=prune.L1Unstructured,
                          amount=0.4)
mask = torch.from_numpy((rng.rand(4, 16) > 0.2).astype(np.float32))
prune.custom_from_mask(net.out, name="weight", mask=mask)
prune.l1_unstructured(net.fc1, name="weight", amount=0.2)  # a second round composes into a PruningContainer
assert hasattr(net.fc1, "weight_orig") and hasattr(net.fc1, "weight_mask")
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
ft_losses = []
net.train()
for step in range(30):
    loss = F.binary_cross_entropy_with_logits(net(X), Y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    ft_losses.append(loss.item())
sparsity = {n: float((getattr(net, n).weight == 0).float().mean()) for n in ("fc1", "fc2", "fc3", "fc4", "out")}
for n in ("fc1", "fc2", "fc3", "fc4", "out"):
    prune.remove(getattr(net, n), "weight")
with torch.no_grad():
    acc_pruned = (((net(X) > 0).float()) == Y).float().mean().item()

print(f"initial_loss={losses[0]:.6f}")
print(f"loss_30={losses[30]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"accuracy={acc_param:.6f}")
print(f"spectral_sigma={sigma:.6f}")
print(f"orthogonal_ok={int(ortho_err < 1e-5)}")
print(f"symmetric_err={sym_err:.6f}")
print(f"weight_norm_g={wn_g:.6f}")
print(f"removed_ok={int(removed_gap < 1e-5)}")
print(f"cayley_grad={ortho_norms[1]:.6f}")
print(f"householder_ok={int(ortho_norms[2] < 1e-5)}")
print(f"householder_grad={ortho_norms[3]:.6f}")
for n, v in sparsity.items():
    print(f"sparsity_{n}={v:.6f}")
print(f"finetune_initial={ft_losses[0]:.6f}")
print(f"finetune_final={ft_losses[-1]:.6f}")
print(f"pruned_accuracy={acc_pruned:.6f}")
print(f"param_names_after={len(list(net.named_parameters()))}")
