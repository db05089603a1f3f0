"""Polynomial regression: fit y = 0.5 x^3 - x + 2 with nn.Linear on [x, x^2, x^3] features, MSELoss and LBFGS."""
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(42)
x = torch.linspace(-2, 2, 100).unsqueeze(1)
y_true = 0.5 * x ** 3 - x + 2
noise = torch.from_numpy(np.random.default_rng(0).normal(0, 0.1, size=(100, 1)).astype(np.float32))
y = y_true + noise


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3]."""
    return torch.cat([x ** i for i in range(1, 4)], 1)


X = make_features(x)
model = nn.Linear(3, 1)
with torch.no_grad():  # identical start under every backend
    model.weight.copy_(torch.tensor([[0.1, -0.2, 0.3]]))
    model.bias.fill_(0.0)
criterion = nn.MSELoss()
optimizer = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=20, history_size=10, line_search_fn="strong_wolfe")


def closure():
    optimizer.zero_grad()
    loss = criterion(model(X), y)
    loss.backward()
    return loss


initial = criterion(model(X), y).item()
for step in range(5):
    loss = optimizer.step(closure)
    print(f"step {step}: loss {loss.item():.6f}")
final = criterion(model(X), y).item()
w = model.weight.detach().view(-1).tolist()
b = model.bias.item()
print("==> Learned function: y = {:+.3f} x^1 {:+.3f} x^2 {:+.3f} x^3 {:+.3f}".format(*w, b))
print(f"initial_loss={initial:.6f}")
print(f"final_loss={final:.6f}")
print(f"w1={w[0]:.4f}")
print(f"w2={w[1]:.4f}")
print(f"w3={w[2]:.4f}")
print(f"bias={b:.4f}")
