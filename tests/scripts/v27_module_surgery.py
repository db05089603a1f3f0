"""Model plumbing researchers do around training: meta-device construction with to_empty, weight_norm /
orthogonal / spectral_norm parametrizations, pruning, fusing conv+bn for inference, load_state_dict with renamed
keys (a pre-hook), strict=False and assign=True, whole-model pickling with torch.save, deepcopy, freezing a
backbone, register_buffer(persistent=False), and forward pre-hooks / hooks with kwargs.

Weights and data come from NumPy, so every printed metric is the same under every backend.
"""
import copy
import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.prune as prune
from torch.nn.utils import parametrizations, parametrize

rng = np.random.default_rng(31)
X = torch.from_numpy(rng.normal(size=(16, 3, 8, 8)).astype(np.float32))


def fill(module, seed, scale=0.2):
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for name, t in sorted(module.state_dict(keep_vars=True).items()):
            if t.dtype.is_floating_point and "running_var" not in name:
                t.copy_(torch.from_numpy(g.normal(scale=scale, size=tuple(t.shape)).astype(np.float32)))
    return module


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)
        self.register_buffer("scale", torch.ones(1), persistent=False)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(F.relu(self.bn(self.conv(x))), 1).flatten(1)) * self.scale


# Meta-device construction, then materialize and load.
with torch.device("meta"):
    lazy = Net()
assert lazy.conv.weight.is_meta
ref = fill(Net(), 0)
ref.bn.running_var.fill_(1.5)
lazy = lazy.to_empty(device="cpu")
lazy.load_state_dict(ref.state_dict())
lazy.scale.fill_(1.0)  # non-persistent buffers are not in the state dict
ref.eval()
lazy.eval()
print(f"meta_roundtrip={float(torch.equal(lazy(X), ref(X))):.1f}")
print(f"state_keys={len(ref.state_dict())}")

# Fused conv+bn for inference must equal the unfused eval-mode net.
fused_conv = torch.nn.utils.fusion.fuse_conv_bn_eval(ref.conv, ref.bn)
with torch.no_grad():
    fused_out = ref.fc(F.adaptive_avg_pool2d(F.relu(fused_conv(X)), 1).flatten(1))
print(f"fuse_max_diff_small={float((fused_out - ref(X)).abs().max().item() < 1e-5):.1f}")


# Loading an old checkpoint whose keys were named differently, via a state-dict pre-hook.
class Renamed(Net):
    def __init__(self):
        super().__init__()
        self._register_load_state_dict_pre_hook(self._rename)

    @staticmethod
    def _rename(state_dict, prefix, *args):
        for key in list(state_dict):
            if key.startswith(prefix + "classifier."):
                state_dict[prefix + "fc." + key[len(prefix + "classifier."):]] = state_dict.pop(key)


old = {(k.replace("fc.", "classifier.")): v for k, v in ref.state_dict().items()}
old["extra.weight"] = torch.zeros(1)
renamed = Renamed()
result = renamed.load_state_dict(old, strict=False)
print(f"unexpected_keys={len(result.unexpected_keys)}")
print(f"missing_keys={len(result.missing_keys)}")
assign_target = Net()
assign_target.load_state_dict(ref.state_dict(), assign=True)
print(f"assign_shares_storage={float(assign_target.fc.weight.data_ptr() == ref.fc.weight.data_ptr()):.1f}")

# Whole-model pickling and deepcopy.
buf = io.BytesIO()
torch.save(ref, buf)
buf.seek(0)
loaded = torch.load(buf, weights_only=False)
twin = copy.deepcopy(ref)
twin.fc.weight.data.mul_(2)
print(f"pickle_equal={float(torch.equal(loaded(X), ref(X))):.1f}")
print(f"deepcopy_independent={float(not torch.equal(twin.fc.weight, ref.fc.weight)):.1f}")

# Parametrizations: weight norm, orthogonal, spectral norm; train a little through them.
model = fill(Net(), 1)
parametrizations.weight_norm(model.fc, name="weight", dim=0)
lin = nn.Linear(6, 6, bias=False)
fill(lin, 2)
parametrizations.orthogonal(lin)
q = lin.weight
print(f"orthogonal_err_small={float((q @ q.T - torch.eye(6)).abs().max().item() < 1e-5):.1f}")
sn = parametrizations.spectral_norm(fill(nn.Linear(8, 8), 3), n_power_iterations=5)
print(f"weight_norm_g_sum={model.fc.parametrizations.weight.original0.sum().item():.6f}")
for p in model.conv.parameters():
    p.requires_grad_(False)  # freeze the stem
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
target = torch.from_numpy(rng.integers(0, 4, 16))
model.train()
initial = F.cross_entropy(model(X), target).item()
for _ in range(10):
    opt.zero_grad()
    loss = F.cross_entropy(model(X), target)
    loss.backward()
    opt.step()
print(f"initial_loss={initial:.6f}")
print(f"final_loss={loss.item():.6f}")
print(f"frozen_grad_none={float(model.conv.weight.grad is None):.1f}")
with parametrize.cached():
    w1 = model.fc.weight
    w2 = model.fc.weight
print(f"cached_same_object={float(w1 is w2):.1f}")
parametrize.remove_parametrizations(model.fc, "weight", leave_parametrized=True)
print(f"removed_is_param={float(isinstance(model.fc.weight, nn.Parameter)):.1f}")
print(f"fc_weight_sum={model.fc.weight.sum().item():.6f}")

# Pruning: l1 unstructured then global, made permanent.
prune.l1_unstructured(model.fc, name="weight", amount=0.5)
print(f"pruned_zeros={int((model.fc.weight == 0).sum())}")
prune.global_unstructured([(model.conv, "weight"), (model.fc, "bias")], pruning_method=prune.L1Unstructured,
                          amount=0.3)
prune.remove(model.conv, "weight")
print(f"global_conv_zeros={int((model.conv.weight == 0).sum())}")
print(f"has_mask_buffer={float(hasattr(model.fc, 'weight_mask')):.1f}")

# Hooks with kwargs: a pre-hook that rescales the input, a forward hook that records the output norm.
records = []
h1 = ref.register_forward_pre_hook(lambda m, args, kwargs: ((args[0] * 0.5,), kwargs), with_kwargs=True)
h2 = ref.register_forward_hook(lambda m, args, out: records.append(out.norm().item()))
with torch.no_grad():
    halved = ref(X)
h1.remove()
h2.remove()
print(f"prehook_effect={float(torch.allclose(halved, ref(X * 0.5))):.1f}")
print(f"hook_records={len(records)}")
print(f"sn_sigma_le1={float(torch.linalg.matrix_norm(sn.weight, 2).item() <= 1.0 + 1e-3):.1f}")
