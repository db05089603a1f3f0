"""Model ensembling and functional training with torch.func (after the PyTorch "Model ensembling" tutorial and
functorch-style training loops): torch.func.stack_module_state over a list of models, a "meta" base copy via
copy.deepcopy(...).to("meta"), vmap over functional_call with in_dims=(0, 0, None) and (0, 0, 0), per-model losses
from vmap(grad_and_value) updating the stacked parameters by hand (SGD with momentum in a dict comprehension),
jacrev/jacfwd Jacobians of a model output, and torch.func.linearize-free JVPs with jvp.

Weights and data come from NumPy; training is deterministic, so metrics must match torch.
"""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, jacfwd, jacrev, jvp, stack_module_state, vmap


class SimpleMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 3)
        self.register_buffer("scale", torch.tensor(1.0))

    def forward(self, x):
        x = F.gelu(self.fc1(x))
        x = F.silu(self.fc2(x))
        return self.fc3(x) * self.scale


rng = np.random.RandomState(0)
num_models = 5
models = [SimpleMLP() for _ in range(num_models)]
with torch.no_grad():
    for m in models:
        for p in m.parameters():
            p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.4).astype(np.float32)))
X = torch.from_numpy(rng.randn(64, 4).astype(np.float32))
Y = torch.from_numpy((X[:, 0] > 0).long().numpy() + (X[:, 1] > 0.5).long().numpy())
minibatches = X[:60].view(num_models, 12, 4)

params, buffers = stack_module_state(models)
base_model = copy.deepcopy(models[0]).to("meta")


def fmodel(params, buffers, x):
    return functional_call(base_model, (params, buffers), (x,))


same_batch = vmap(fmodel, in_dims=(0, 0, None))(params, buffers, X[:8])
per_model_batch = vmap(fmodel)(params, buffers, minibatches)
loop_same = torch.stack([m(X[:8]) for m in models])
print(f"vmap_matches_loop={int(torch.allclose(same_batch, loop_same, atol=1e-6))}")
print(f"per_model_shape_ok={int(tuple(per_model_batch.shape) == (num_models, 12, 3))}")


def loss_fn(p, b, x, y):
    return F.cross_entropy(fmodel(p, b, x), y)


ens_step = vmap(grad_and_value(loss_fn), in_dims=(0, 0, None, None))
params = {k: v.detach().clone() for k, v in params.items()}
momentum = {k: torch.zeros_like(v) for k, v in params.items()}
history = []
for step in range(40):
    idx = torch.from_numpy(rng.choice(64, 16, replace=False))
    grads, losses = ens_step(params, buffers, X[idx], Y[idx])
    momentum = {k: 0.9 * momentum[k] + grads[k] for k in params}
    params = {k: params[k] - 0.1 * momentum[k] for k in params}
    history.append(losses.mean().item())

with torch.no_grad():
    logits = vmap(fmodel, in_dims=(0, 0, None))(params, buffers, X)
    ens_prob = logits.softmax(-1).mean(0)
    acc = (ens_prob.argmax(-1) == Y).float().mean().item()
    disagreement = (logits.argmax(-1) != ens_prob.argmax(-1)).float().mean().item()
single = {k: v[0] for k, v in params.items()}
single_buf = {k: v[0] for k, v in buffers.items()}
x0 = X[0]
J_rev = jacrev(lambda x: fmodel(single, single_buf, x))(x0)
J_fwd = jacfwd(lambda x: fmodel(single, single_buf, x))(x0)
_, jvp_out = jvp(lambda x: fmodel(single, single_buf, x), (x0,), (torch.ones(4),))
print(f"jac_agree={int(torch.allclose(J_rev, J_fwd, atol=1e-5))}")
print(f"jvp_matches_jac={int(torch.allclose(jvp_out, J_rev.sum(1), atol=1e-5))}")
print(f"initial_loss={history[0]:.6f}")
print(f"loss_20={history[20]:.6f}")
print(f"final_loss={history[-1]:.6f}")
print(f"accuracy={acc:.6f}")
print(f"disagreement={disagreement:.6f}")
print(f"jac_sum={J_rev.sum().item():.6f}")
print(f"fc1_norm_model3={params['fc1.weight'][3].norm().item():.6f}")
