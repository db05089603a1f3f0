"""Custom autograd and hook idioms from domain-adaptation and interpretability repos: a gradient reversal layer
(DANN, after fungtion/DANN's functions.py) as a torch.autograd.Function with ctx attributes, a straight-through
sign estimator with ctx.save_for_backward / ctx.needs_input_grad / once_differentiable, a Function with
mark_non_differentiable outputs (argmax indices), setup_context-style Functions, forward hooks collecting features,
register_full_backward_hook for gradient statistics, tensor.register_hook gradient clipping, forward pre-hooks with
kwargs, and torch.autograd.gradcheck in float64.

Weights and data come from NumPy; training is deterministic, so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


class ReverseLayerF(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        output = grad_output.neg() * ctx.alpha
        return output, None


class SignSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_output.clone()
            grad_input[x.abs() > 1] = 0  # hardtanh straight-through
        return grad_input


class MaxWithIndex(torch.autograd.Function):
    @staticmethod
    def forward(x):
        values, idx = x.max(dim=-1)
        return values, idx

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        _, idx = output
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        ctx.shape = x.shape

    @staticmethod
    def backward(ctx, grad_values, grad_idx):
        (idx,) = ctx.saved_tensors
        grad = grad_values.new_zeros(ctx.shape)
        return grad.scatter_(-1, idx.unsqueeze(-1), grad_values.unsqueeze(-1))


class DANN(nn.Module):
    def __init__(self):
        super().__init__()
        self.feature = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 12), nn.ReLU())
        self.class_classifier = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3))
        self.domain_classifier = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 2))
        self.binary_head = nn.Linear(12, 4)

    def forward(self, x, alpha):
        feature = self.feature(x)
        reverse_feature = ReverseLayerF.apply(feature, alpha)
        codes = SignSTE.apply(self.binary_head(feature))
        best, which = MaxWithIndex.apply(self.class_classifier(feature) + 0.1 * codes[:, :3])
        return self.class_classifier(feature), self.domain_classifier(reverse_feature), best, which


rng = np.random.RandomState(0)
model = DANN()
with torch.no_grad():
    for p in model.parameters():
        if p.dim() > 1:
            p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.4).astype(np.float32)))
        else:
            p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.05).astype(np.float32)))
src_x = torch.from_numpy(rng.randn(48, 6).astype(np.float32))
src_y = torch.from_numpy((src_x[:, 0].numpy() > 0).astype(np.int64) + (src_x[:, 1].numpy() > 0.5).astype(np.int64))
tgt_x = torch.from_numpy((rng.randn(48, 6) * 1.3 + 0.4).astype(np.float32))

features, grad_norms, pre_kwargs = {}, {}, []
h1 = model.feature.register_forward_hook(lambda m, i, o: features.__setitem__("feat", o.detach()))
h2 = model.domain_classifier[0].register_full_backward_hook(
    lambda m, gin, gout: grad_norms.setdefault("dom_in", []).append(gin[0].norm().item()))
h3 = model.register_forward_pre_hook(lambda m, args, kwargs: pre_kwargs.append(sorted(kwargs)), with_kwargs=True)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
losses, dom_losses = [], []
for it in range(30):
    p = it / 30
    alpha = 2.0 / (1.0 + np.exp(-10 * p)) - 1
    x = torch.cat([src_x, tgt_x])
    class_out, domain_out, best, which = model(x, alpha=alpha)
    assert not which.requires_grad and which.dtype == torch.int64
    feat = features["feat"]
    domain_label = torch.cat([torch.zeros(48, dtype=torch.long), torch.ones(48, dtype=torch.long)])
    err_label = F.cross_entropy(class_out[:48], src_y)
    err_domain = F.cross_entropy(domain_out, domain_label)
    loss = err_label + err_domain + 0.01 * best.mean()
    opt.zero_grad()
    handle = feat.requires_grad  # hooks saw a detached tensor
    loss.backward()
    opt.step()
    losses.append(err_label.item())
    dom_losses.append(err_domain.item())
for h in (h1, h2, h3):
    h.remove()

# tensor hook clipping a gradient, and gradcheck of the custom Functions in float64
w = torch.tensor([0.5, -1.5, 2.0], requires_grad=True)
w.register_hook(lambda g: g.clamp(-0.3, 0.3))
(w ** 3).sum().backward()
x64 = torch.from_numpy(rng.randn(3, 5)).requires_grad_(True)
ok_rev = not torch.autograd.gradcheck(lambda t: ReverseLayerF.apply(t, 0.7), (x64,), raise_exception=False)  # reversed
ok_max = torch.autograd.gradcheck(lambda t: MaxWithIndex.apply(t)[0], (x64,))
with torch.no_grad():
    model.eval()
    acc = (model(src_x, alpha=1.0)[0].argmax(1) == src_y).float().mean().item()
print("pre-hook kwargs:", pre_kwargs[0], "hook saw requires_grad:", handle)
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"domain_first={dom_losses[0]:.6f}")
print(f"domain_last={dom_losses[-1]:.6f}")
print(f"accuracy={acc:.6f}")
print(f"dom_grad_first={grad_norms['dom_in'][0]:.6f}")
print(f"dom_grad_last={grad_norms['dom_in'][-1]:.6f}")
print(f"n_hook_calls={len(grad_norms['dom_in'])}")
print(f"clipped_grad_sum={w.grad.sum().item():.6f}")
print(f"gradchecks={int(ok_rev and ok_max)}")
print(f"feat_mean={feat.mean().item():.6f}")
