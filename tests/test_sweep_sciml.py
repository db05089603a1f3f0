"""Scientific-ML research code, written once against ``lib`` and run with torch and jitorch from torch's initial
weights and the same NumPy data: a physics-informed network for Burgers' equation (``u_t``, ``u_x``, ``u_xx`` by
``autograd.grad(create_graph=True)`` with ``ones_like`` grad_outputs, inputs made ``.float()`` from float64 leaves,
Adam then ``LBFGS(line_search_fn="strong_wolfe")`` with a closure) and a heat-equation variant with a hard
initial-condition constraint; a 2-D Fourier Neural Operator (``fft.rfft2``/``irfft2(s=)``, complex
``nn.Parameter(torch.randn(..., dtype=torch.cfloat))`` weights, ``einsum`` on complex tensors over truncated modes
written into a zero ``out_ft``, a coordinate grid, padding, relative Lp loss, Adam with weight decay and StepLR); and
a Hamiltonian neural network (``dH/dx`` by ``autograd.grad``, the symplectic split with ``split``/``cat`` and a
permutation matrix, a leapfrog rollout under ``enable_grad``)."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_runs_match, copy_weights


def make_mlp(lib, layers, act="tanh"):
    nn = lib.nn

    class DNN(nn.Module):
        def __init__(self):
            super().__init__()
            mods = []
            for i in range(len(layers) - 2):
                mods += [(f"layer_{i}", nn.Linear(layers[i], layers[i + 1])),
                         (f"activation_{i}", nn.Tanh() if act == "tanh" else nn.Softplus())]
            mods.append((f"layer_{len(layers) - 2}", nn.Linear(layers[-2], layers[-1])))
            self.layers = nn.Sequential(OrderedDict(mods))
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_normal_(m.weight)
                    nn.init.zeros_(m.bias)

        def forward(self, x):
            return self.layers(x)

    return DNN()


def burgers_data(n_u=40, n_f=120, seed=0):
    """Initial and boundary points of u_t + u u_x = nu u_xx on [-1, 1] x [0, 1], and interior collocation points."""
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(-1, 1, (n_u // 2, 1))
    tb = rng.uniform(0, 1, (n_u // 2, 1))
    X_u = np.vstack([np.hstack([x0, np.zeros_like(x0)]), np.hstack([np.sign(tb - 0.5), tb])])
    u = np.vstack([-np.sin(np.pi * x0), np.zeros_like(tb)])
    X_f = np.hstack([rng.uniform(-1, 1, (n_f, 1)), rng.uniform(0, 1, (n_f, 1))])
    return X_u, u, X_f


class PhysicsInformedNN:
    """The structure of the widely copied PyTorch port of Raissi's Burgers PINN."""

    def __init__(self, lib, ref, X_u, u, X_f, nu=0.01 / math.pi, adam_steps=4, lbfgs_iter=15):
        self.lib, self.nu, self.iter = lib, nu, 0
        self.x_u = lib.tensor(X_u[:, 0:1], requires_grad=True).float()
        self.t_u = lib.tensor(X_u[:, 1:2], requires_grad=True).float()
        self.x_f = lib.tensor(X_f[:, 0:1], requires_grad=True).float()
        self.t_f = lib.tensor(X_f[:, 1:2], requires_grad=True).float()
        self.u = lib.tensor(u).float()
        self.dnn = make_mlp(lib, [2, 20, 20, 20, 1])
        copy_weights(ref, self.dnn)
        self.adam = lib.optim.Adam(self.dnn.parameters(), lr=1e-3)
        self.optimizer = lib.optim.LBFGS(self.dnn.parameters(), lr=1.0, max_iter=lbfgs_iter,
                                         max_eval=lbfgs_iter * 5 // 4, history_size=50, tolerance_grad=1e-5,
                                         tolerance_change=1.0 * np.finfo(float).eps, line_search_fn="strong_wolfe")
        self.adam_steps, self.losses = adam_steps, []

    def net_u(self, x, t):
        return self.dnn(self.lib.cat([x, t], dim=1))

    def net_f(self, x, t):
        grad = self.lib.autograd.grad
        u = self.net_u(x, t)
        u_t = grad(u, t, grad_outputs=self.lib.ones_like(u), retain_graph=True, create_graph=True)[0]
        u_x = grad(u, x, grad_outputs=self.lib.ones_like(u), retain_graph=True, create_graph=True)[0]
        u_xx = grad(u_x, x, grad_outputs=self.lib.ones_like(u_x), retain_graph=True, create_graph=True)[0]
        return u_t + u * u_x - self.nu * u_xx

    def loss_func(self):
        self.optimizer.zero_grad()
        u_pred = self.net_u(self.x_u, self.t_u)
        f_pred = self.net_f(self.x_f, self.t_f)
        loss = self.lib.mean((self.u - u_pred) ** 2) + self.lib.mean(f_pred ** 2)
        loss.backward()
        self.iter += 1
        self.losses.append(loss.detach())
        return loss

    def train(self):
        self.dnn.train()
        for _ in range(self.adam_steps):
            self.adam.zero_grad()
            self.loss_func()
            self.adam.step()
        self.optimizer.step(self.loss_func)

    def predict(self, X):
        x = self.lib.tensor(X[:, 0:1], requires_grad=True).float()
        t = self.lib.tensor(X[:, 1:2], requires_grad=True).float()
        self.dnn.eval()
        u, f = self.net_u(x, t), self.net_f(x, t)
        return u.detach(), f.detach()


def test_burgers_pinn_adam_then_lbfgs_matches_torch():
    X_u, u, X_f = burgers_data()
    X_star = np.stack(np.meshgrid(np.linspace(-1, 1, 9), np.linspace(0, 1, 5)), -1).reshape(-1, 2)
    torch.manual_seed(0)
    ref = make_mlp(torch, [2, 20, 20, 20, 1])
    res = []
    for lib in (torch, jitorch):
        model = PhysicsInformedNN(lib, ref, X_u, u, X_f)
        model.train()
        state = model.optimizer.state[model.optimizer._params[0]]
        res.append({"losses": model.losses, "iter": model.iter, "n_iter": state["n_iter"],
                    "func_evals": state["func_evals"], "params": dict(model.dnn.named_parameters()),
                    "predict": model.predict(X_star), "t": state["t"], "d": state["d"],
                    "old_dirs": state["old_dirs"], "ro": state["ro"]})
    th, jt = res
    assert float(th["losses"][-1]) < 0.5 * float(th["losses"][0])
    # each L-BFGS step compounds the last's rounding (curvature pairs, line-search interpolation): float32 runs
    # agree to about 1e-4 after 15 iterations (BLAS builds differ in the products' rounding, the search direction's
    # entries near 0 most); the iteration and evaluation counts are exact
    assert (th.pop("iter"), th.pop("n_iter"), th.pop("func_evals")) == \
        (jt.pop("iter"), jt.pop("n_iter"), jt.pop("func_evals"))
    assert_runs_match(th, jt, rtol=1e-3, atol=1e-4, what="burgers pinn")


def test_heat_pinn_derivatives_and_adam_match_torch():
    """u_t = k u_xx with u = sin(pi x) + t * net(x, t) (the initial condition built in), derivatives taken from a
    single ``(N, 2)`` input with ``.sum()`` outputs and split by column, third-order gradients into the weights."""
    rng = np.random.default_rng(1)
    pts = np.hstack([rng.uniform(0, 1, (64, 1)), rng.uniform(0, 0.5, (64, 1))]).astype(np.float32)
    torch.manual_seed(1)
    ref = make_mlp(torch, [2, 16, 16, 1], act="softplus")
    res = []
    for lib in (torch, jitorch):
        net = make_mlp(lib, [2, 16, 16, 1], act="softplus")
        copy_weights(ref, net)
        opt = lib.optim.Adam(net.parameters(), lr=3e-3)
        out = {"loss": [], "residual": []}
        for _ in range(5):
            xt = lib.tensor(pts).requires_grad_(True)
            x, t = xt[:, :1], xt[:, 1:]
            u = lib.sin(math.pi * x) + t * net(xt)
            du = lib.autograd.grad(u.sum(), xt, create_graph=True)[0]
            u_x, u_t = du[:, 0:1], du[:, 1:2]
            u_xx = lib.autograd.grad(u_x.sum(), xt, create_graph=True)[0][:, 0:1]
            residual = u_t - 0.1 * u_xx
            boundary = net(lib.tensor([[0.0, 0.25], [1.0, 0.25]])) * 0.25
            loss = residual.pow(2).mean() + boundary.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out["loss"].append(loss.detach())
            out["residual"].append(residual.detach())
        out["grads"] = [p.grad for p in net.parameters()]
        res.append(out)
    assert_runs_match(res[0], res[1], rtol=1e-4, atol=1e-6, what="heat pinn")


def make_fno(lib, modes=4, width=8, norm="backward", padding=2):
    nn, F = lib.nn, lib.nn.functional

    class SpectralConv2d(nn.Module):
        def __init__(self, in_channels, out_channels, modes1, modes2):
            super().__init__()
            self.out_channels, self.modes1, self.modes2 = out_channels, modes1, modes2
            self.scale = 1 / (in_channels * out_channels)
            self.weights1 = nn.Parameter(self.scale * lib.randn(in_channels, out_channels, modes1, modes2,
                                                                dtype=lib.cfloat))
            self.weights2 = nn.Parameter(self.scale * lib.randn(in_channels, out_channels, modes1, modes2,
                                                                dtype=lib.cfloat))

        def compl_mul2d(self, input, weights):  # (batch, in_channel, x, y), (in_channel, out_channel, x, y)
            return lib.einsum("bixy,ioxy->boxy", input, weights)

        def forward(self, x):
            batchsize = x.shape[0]
            x_ft = lib.fft.rfft2(x, norm=norm)
            out_ft = lib.zeros(batchsize, self.out_channels, x.size(-2), x.size(-1) // 2 + 1, dtype=lib.cfloat,
                               device=x.device)
            out_ft[:, :, :self.modes1, :self.modes2] = self.compl_mul2d(x_ft[:, :, :self.modes1, :self.modes2],
                                                                        self.weights1)
            out_ft[:, :, -self.modes1:, :self.modes2] = self.compl_mul2d(x_ft[:, :, -self.modes1:, :self.modes2],
                                                                         self.weights2)
            return lib.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)), norm=norm)

    class FNO2d(nn.Module):
        def __init__(self):
            super().__init__()
            self.padding = padding
            self.fc0 = nn.Linear(3, width)  # input channel is 3: (a(x, y), x, y)
            self.convs = nn.ModuleList([SpectralConv2d(width, width, modes, modes) for _ in range(3)])
            self.ws = nn.ModuleList([nn.Conv2d(width, width, 1) for _ in range(3)])
            self.fc1 = nn.Linear(width, 32)
            self.fc2 = nn.Linear(32, 1)

        def forward(self, x):
            grid = self.get_grid(x.shape, x.device)
            x = lib.cat((x, grid), dim=-1)
            x = self.fc0(x).permute(0, 3, 1, 2)
            if self.padding:
                x = F.pad(x, [0, self.padding, 0, self.padding])  # pad the domain if input is non-periodic
            for i, (conv, w) in enumerate(zip(self.convs, self.ws)):
                x = conv(x) + w(x)
                if i < len(self.convs) - 1:
                    x = F.gelu(x)
            if self.padding:
                x = x[..., :-self.padding, :-self.padding]
            x = F.gelu(self.fc1(x.permute(0, 2, 3, 1)))
            return self.fc2(x)

        def get_grid(self, shape, device):
            batchsize, size_x, size_y = shape[0], shape[1], shape[2]
            gridx = lib.tensor(np.linspace(0, 1, size_x), dtype=lib.float)
            gridx = gridx.reshape(1, size_x, 1, 1).repeat([batchsize, 1, size_y, 1])
            gridy = lib.tensor(np.linspace(0, 1, size_y), dtype=lib.float)
            gridy = gridy.reshape(1, 1, size_y, 1).repeat([batchsize, size_x, 1, 1])
            return lib.cat((gridx, gridy), dim=-1).to(device)

    return FNO2d()


class LpLoss:
    def __init__(self, lib, p=2):
        self.lib, self.p = lib, p

    def __call__(self, x, y):
        num_examples = x.size()[0]
        diff_norms = self.lib.norm(x.reshape(num_examples, -1) - y.reshape(num_examples, -1), self.p, 1)
        y_norms = self.lib.norm(y.reshape(num_examples, -1), self.p, 1)
        return self.lib.mean(diff_norms / y_norms)


def darcy_like(n, s=12, seed=0):
    """Smooth random coefficient fields a and a nonlinear smoothing of them as the target operator."""
    rng = np.random.default_rng(seed)
    k = np.fft.fftfreq(s)[:, None] ** 2 + np.fft.fftfreq(s)[None, :] ** 2
    a = np.fft.ifft2(np.fft.fft2(rng.normal(size=(n, s, s))) * np.exp(-40 * k)).real
    u = np.fft.ifft2(np.fft.fft2(np.tanh(3 * a)) / (1 + 30 * k)).real
    return a[..., None].astype(np.float32), u[..., None].astype(np.float32)


@pytest.mark.parametrize("norm,padding", [("backward", 2), ("ortho", 0), ("forward", 3)])
def test_fourier_neural_operator_matches_torch(norm, padding):
    a, u = darcy_like(8)
    torch.manual_seed(2)
    ref = make_fno(torch, norm=norm, padding=padding)
    assert ref.convs[0].weights1.dtype == torch.complex64
    res = []
    for lib in (torch, jitorch):
        model = make_fno(lib, norm=norm, padding=padding)
        copy_weights(ref, model)
        optimizer = lib.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
        scheduler = lib.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        myloss = LpLoss(lib)
        out = {"loss": []}
        for ep in range(4):
            model.train()
            for b in range(2):
                x, y = lib.tensor(a[4 * b: 4 * b + 4]), lib.tensor(u[4 * b: 4 * b + 4])
                optimizer.zero_grad()
                loss = myloss(model(x).view(4, -1), y.view(4, -1))
                loss.backward()
                optimizer.step()
                out["loss"].append(loss.detach())
            scheduler.step()
        out["grads"] = {n: p.grad for n, p in model.named_parameters()}
        out["params"] = dict(model.named_parameters())
        out["state"] = [[s["exp_avg"], s["exp_avg_sq"]] for s in optimizer.state.values()]
        model.eval()
        with lib.no_grad():  # zero-shot super-resolution: the same weights on a finer grid
            fine = lib.tensor(darcy_like(2, s=20, seed=5)[0])
            out["fine"] = model(fine)
        res.append(out)
    assert res[1]["grads"]["convs.0.weights1"].dtype == jitorch.complex64
    assert_runs_match(res[0], res[1], rtol=1e-4, atol=1e-6, what=f"fno {norm}")


def make_hnn(lib, input_dim=2, hidden=32):
    nn = lib.nn

    class HNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.differentiable_model = nn.Sequential(nn.Linear(input_dim, hidden), nn.Tanh(),
                                                      nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 2))
            self.M = self.permutation_tensor(input_dim)

        def forward(self, x):
            return self.differentiable_model(x).split(1, 1)  # the conservative and solenoidal potentials

        def time_derivative(self, x):
            F1, F2 = self.forward(x)
            dF1 = lib.autograd.grad(F1.sum(), x, create_graph=True)[0]
            conservative_field = dF1 @ lib.eye(*self.M.shape)
            dF2 = lib.autograd.grad(F2.sum(), x, create_graph=True)[0]
            return conservative_field + dF2 @ self.M.t()

        def permutation_tensor(self, n):
            M = lib.eye(n)
            return lib.cat([M[n // 2:], -M[:n // 2]])

    return HNN()


def spring_data(n=64, seed=0):
    rng = np.random.default_rng(seed)
    r = np.sqrt(rng.uniform(0.1, 1.0, n))
    theta = rng.uniform(0, 2 * np.pi, n)
    x = np.stack([r * np.cos(theta), r * np.sin(theta)], 1)
    dxdt = np.stack([x[:, 1], -x[:, 0]], 1)  # H = (q^2 + p^2) / 2
    return (x + 0.01 * rng.normal(size=x.shape)).astype(np.float32), dxdt.astype(np.float32)


def test_hamiltonian_nn_training_and_leapfrog_rollout_match_torch():
    x_np, dxdt_np = spring_data()
    torch.manual_seed(3)
    ref = make_hnn(torch)
    res = []
    for lib in (torch, jitorch):
        model = make_hnn(lib)
        copy_weights(ref, model)
        optim = lib.optim.Adam(model.parameters(), 1e-2, weight_decay=1e-4)
        out = {"loss": []}
        x, dxdt = lib.tensor(x_np, requires_grad=True), lib.tensor(dxdt_np)
        for _ in range(8):
            loss = (dxdt - model.time_derivative(x)).pow(2).mean()
            loss.backward()
            optim.step()
            optim.zero_grad()
            out["loss"].append(loss.detach())

        def dH(z):  # the learned Hamiltonian's gradient, split into dH/dq and dH/dp
            with lib.enable_grad():
                z = z.detach().requires_grad_(True)
                H = model(z)[0]
                dq, dp = lib.split(lib.autograd.grad(H.sum(), z)[0], 1, dim=-1)
            return dq, dp

        z, traj = lib.tensor([[1.0, 0.0], [0.0, 0.5]]), []
        with lib.no_grad():
            for _ in range(10):  # leapfrog: half kick, drift, half kick
                q, p = z.split(1, dim=-1)
                p = p - 0.05 * dH(lib.cat([q, p], -1))[0]
                q = q + 0.1 * dH(lib.cat([q, p], -1))[1]
                p = p - 0.05 * dH(lib.cat([q, p], -1))[0]
                z = lib.cat([q, p], dim=-1)
                traj.append(z)
        out["traj"] = lib.stack(traj)
        out["energy"] = model(out["traj"].reshape(-1, 2))[0].detach()
        out["field"] = model.time_derivative(lib.tensor(x_np[:8], requires_grad=True)).detach()
        out["params"] = dict(model.named_parameters())
        res.append(out)
    assert float(res[0]["loss"][-1]) < float(res[0]["loss"][0])
    assert_runs_match(res[0], res[1], rtol=1e-4, atol=1e-6, what="hnn")
