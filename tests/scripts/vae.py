"""Variational autoencoder (Kingma & Welling) on binarized 8x8 digits, the PyTorch-examples way."""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
rng = np.random.default_rng(0)
# Synthetic "digits": 10 prototype 8x8 binary patterns with 10% pixel noise.
protos = rng.random((10, 64)) > 0.5
labels = rng.integers(0, 10, size=512)
flip = rng.random((512, 64)) < 0.1
data = torch.from_numpy(np.logical_xor(protos[labels], flip).astype(np.float32))
loader = DataLoader(TensorDataset(data), batch_size=64, shuffle=True)


class VAE(nn.Module):
    def __init__(self, latent=4):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc21 = nn.Linear(32, latent)
        self.fc22 = nn.Linear(32, latent)
        self.fc3 = nn.Linear(latent, 32)
        self.fc4 = nn.Linear(32, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


model = VAE()
optimizer = optim.Adam(model.parameters(), lr=1e-2)
history = []
for epoch in range(1, 9):
    model.train()
    train_loss = 0
    for batch_idx, (x,) in enumerate(loader):
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(x)
        loss = loss_function(recon_batch, x, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
    history.append(train_loss / len(loader.dataset))
    print(f"====> Epoch: {epoch} Average loss: {history[-1]:.4f}")

model.eval()
with torch.no_grad():
    sample = model.decode(torch.randn(16, 4))
    assert sample.shape == (16, 64) and 0 <= sample.min().item() <= sample.max().item() <= 1
print(f"initial_loss={history[0]:.6f}")
print(f"final_loss={history[-1]:.6f}")
