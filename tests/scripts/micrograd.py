"""micrograd-style sanity check: many scalar (0-d) tensor ops, backward, and the resulting .grad values."""
import torch

x = torch.Tensor([-4.0]).double()
x.requires_grad = True
z = 2 * x + 2 + x
q = z.relu() + z * x
h = (z * z).relu()
y = h + q + q * x
y.backward()
print(f"y1={y.data.item():.8f}")
print(f"xgrad1={x.grad.item():.8f}")

a = torch.tensor(-4.0, dtype=torch.double, requires_grad=True)
b = torch.tensor(2.0, dtype=torch.double, requires_grad=True)
c = a + b
d = a * b + b ** 3
c = c + c + 1
c = c + 1 + c + (-a)
d = d + d * 2 + (b + a).relu()
d = d + 3 * d + (b - a).relu()
e = c - d
f = e ** 2
g = f / 2.0
g = g + 10.0 / f
g.backward()
print(f"g={g.data.item():.8f}")
print(f"agrad={a.grad.item():.8f}")
print(f"bgrad={b.grad.item():.8f}")

# More scalar ops: tanh, exp, log, sigmoid, division by tensors, max/min, abs, sqrt, where, clamp.
u = torch.tensor(0.7, requires_grad=True)
v = torch.tensor(-1.3, requires_grad=True)
w = torch.tanh(u * v) + torch.exp(u) / (1 + v.abs()) - torch.log(u + 2) * torch.sigmoid(v)
w = w + torch.maximum(u, v) * torch.minimum(u, v) + (u * u + v * v).sqrt()
w = w + torch.where(u > v, u ** 2, v ** 2) + v.clamp(min=-1.0) * 3 + u.pow(v.detach().abs())
w = w + torch.atan2(u, v) + (u - v).sinh() / 10 + v.cos() * u.sin()
w.backward()
assert u.grad.dim() == 0 and v.grad.shape == torch.Size([])
print(f"w={w.item():.6f}")
print(f"ugrad={u.grad.item():.6f}")
print(f"vgrad={v.grad.item():.6f}")

# Gradient accumulation across two backward passes, then zeroing in place.
s = torch.tensor(3.0, requires_grad=True)
(s * s).backward()
(s ** 3).backward()
print(f"sgrad_acc={s.grad.item():.6f}")
s.grad.zero_()
(s.exp() * 2).backward()
print(f"sgrad_exp={s.grad.item():.6f}")

# Higher order: d2/dt2 t^4 at t=1.5 via create_graph.
t = torch.tensor(1.5, requires_grad=True)
(dt,) = torch.autograd.grad(t ** 4, t, create_graph=True)
(d2t,) = torch.autograd.grad(dt, t)
print(f"d1={dt.item():.6f}")
print(f"d2={d2t.item():.6f}")
assert torch.allclose(d2t, torch.tensor(12 * 1.5 ** 2))
