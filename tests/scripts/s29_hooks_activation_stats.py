"""Instrumenting a network with hooks, the way interpretability and training-diagnostics code does (after
fastai's ActivationStats / Hooks callbacks, torchvision's feature_extraction idea and "dead ReLU" monitors):
forward hooks collecting per-layer means/stds and dead-unit fractions, a forward hook with with_kwargs=True,
a forward pre-hook that rescales inputs (returning a modified tuple), register_full_backward_hook and
register_full_backward_pre_hook for gradient norms and gradient clipping at a layer, Tensor.register_hook on an
intermediate activation, register_post_accumulate_grad_hook for per-parameter gradient statistics (and an
in-hook optimizer step, the "optimizer in backward" trick), global nn.modules.module.register_module_forward_hook,
handle.remove() mid-training, state_dict pre/post hooks, and feature extraction by named_modules.

Weights from torch.manual_seed, data from NumPy, no dropout: every metric must match torch.
"""
import collections

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x, scale=1.0):
        return self.head(self.features(x)) * scale


rng = np.random.RandomState(0)
X = torch.tensor(rng.randn(48, 1, 8, 8), dtype=torch.float32)
y = torch.from_numpy((X.numpy()[:, 0, :4].mean((1, 2)) > 0).astype(np.int64) + (X.numpy()[:, 0, 4:].mean((1, 2)) > 0))

torch.manual_seed(0)
model = Net()
stats = collections.defaultdict(list)
grad_norms = collections.defaultdict(list)
handles = []


def act_stats(name):
    def hook(module, inp, out):
        stats[name].append((out.mean().item(), out.std().item(), (out <= 0).float().mean().item()))
    return hook


for name, m in model.named_modules():
    if isinstance(m, nn.ReLU):
        handles.append(m.register_forward_hook(act_stats(name)))
    if isinstance(m, nn.Linear):
        handles.append(m.register_full_backward_hook(
            lambda mod, gin, gout, name=name: grad_norms[name].append(gout[0].norm().item())))

seen_kwargs = []
model.register_forward_hook(lambda mod, args, kwargs, out: seen_kwargs.append(kwargs.get("scale", 1.0)),
                            with_kwargs=True)
model.features[0].register_forward_pre_hook(lambda mod, args: (args[0] * 0.5,))
model.head[3].register_full_backward_pre_hook(lambda mod, gout: (gout[0].clamp(-0.05, 0.05),))
global_calls = collections.Counter()
global_handle = nn.modules.module.register_module_forward_hook(
    lambda mod, inp, out: global_calls.update([type(mod).__name__]))

param_grad_max = {}
for name, p in model.named_parameters():
    p.register_post_accumulate_grad_hook(
        lambda p, name=name: param_grad_max.__setitem__(name, p.grad.abs().max().item()))

opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
losses, act_grads = [], []
for step in range(15):
    xb, yb = X[(step * 16) % 48:(step * 16) % 48 + 16], y[(step * 16) % 48:(step * 16) % 48 + 16]
    feats = model.features(xb)
    feats.register_hook(lambda g: act_grads.append(g.abs().sum().item()))
    loss = F.cross_entropy(model.head(feats) * (1.0 + 0.01 * step), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if step == 7:
        for h in handles:
            h.remove()
        global_handle.remove()
model(X[:2], scale=2.0)

# Optimizer-in-backward: each parameter steps inside its own post-accumulate hook.
torch.manual_seed(1)
small = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
per_param_opt = {p: torch.optim.Adam([p], lr=1e-2) for p in small.parameters()}


def step_in_backward(p):
    per_param_opt[p].step()
    per_param_opt[p].zero_grad()


for p in small.parameters():
    p.register_post_accumulate_grad_hook(step_in_backward)
xs = torch.tensor(rng.randn(32, 4), dtype=torch.float32)
ys = xs.sum(1, keepdim=True).sin()
inb_losses = []
for _ in range(20):
    loss = F.mse_loss(small(xs), ys)
    loss.backward()
    inb_losses.append(loss.item())

# state_dict hooks: a post hook that records keys, a load pre-hook that renames "old." keys.
recorded = []
small.register_state_dict_post_hook(lambda mod, sd, prefix, local_metadata: recorded.append(len(sd)))
sd = {k.replace("0.", "old0."): v for k, v in small.state_dict().items()}
small._register_load_state_dict_pre_hook(
    lambda sd, prefix, *args: [sd.__setitem__(k.replace("old0.", "0."), sd.pop(k)) for k in list(sd) if "old0." in k])
missing = small.load_state_dict(sd, strict=True)
first_relu = stats["features.1"]
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"relu_calls={len(first_relu)}")
print(f"relu_mean_first={first_relu[0][0]:.6f}")
print(f"relu_dead_last={first_relu[-1][2]:.6f}")
print(f"head_grad_norm_sum={sum(grad_norms['head.3']):.6f}")
print(f"head1_grad_norm_last={grad_norms['head.1'][-1]:.6f}")
print(f"act_grad_sum={sum(act_grads):.6f}")
print(f"kwargs_scale_sum={sum(seen_kwargs):.1f}")
print(f"global_conv_calls={global_calls['Conv2d']}")
print(f"global_linear_calls={global_calls['Linear']}")
print(f"param_grad_max_conv={param_grad_max['features.0.weight']:.6f}")
print(f"inb_first={inb_losses[0]:.6f}")
print(f"inb_last={inb_losses[-1]:.6f}")
print(f"grads_cleared={float(all(p.grad is None for p in small.parameters()))}")
print(f"sd_hook_len={recorded[-1]}")
print(f"load_ok={float(not missing.missing_keys and not missing.unexpected_keys)}")
