"""Classical linear-algebra pipelines in float64, as feature-analysis and alignment code writes them: PCA by
torch.linalg.svd (full_matrices=False) with sign-fixed components and explained variance, torch.pca_lowrank checked
against it, ZCA whitening through torch.linalg.eigh of the covariance (torch.cov), Cholesky whitening with
torch.linalg.solve_triangular, orthogonal Procrustes alignment, CCA via QR (torch.linalg.qr) and svdvals, least-
squares regression by torch.linalg.lstsq (gelsd driver) against the normal equations with torch.linalg.solve and
against Householder QR (torch.geqrf, torch.ormqr, linalg.householder_product), Mahalanobis distances via
cholesky_ex, torch.linalg.matrix_rank / cond / slogdet, and a trained linear probe whose weight is kept orthonormal
by QR retraction after each SGD step.

All inputs come from NumPy and the computations are deterministic, so every metric must match torch.
"""
import numpy as np
import torch

rng = np.random.RandomState(0)
n, d = 200, 6
latent = rng.randn(n, 3)
mixing = rng.randn(3, d)
X = torch.from_numpy(latent @ mixing + 0.1 * rng.randn(n, d))
Y = torch.from_numpy(latent @ rng.randn(3, 4) + 0.2 * rng.randn(n, 4))

# PCA by SVD with a deterministic sign convention (sklearn's svd_flip).
Xc = X - X.mean(dim=0, keepdim=True)
U, S, Vh = torch.linalg.svd(Xc, full_matrices=False)
max_abs_rows = torch.argmax(torch.abs(U), dim=0)
signs = torch.sign(U[max_abs_rows, torch.arange(U.shape[1])])
Vh = Vh * signs[:, None]
explained = S.pow(2) / (n - 1)
ratio = explained / explained.sum()
scores = Xc @ Vh[:3].T
_, S_lr, V_lr = torch.pca_lowrank(X, q=3, center=True, niter=4)
recon_err = torch.linalg.matrix_norm(Xc - scores @ Vh[:3], ord="fro") / torch.linalg.matrix_norm(Xc)

# ZCA and Cholesky whitening.
C = torch.cov(X.T)
evals, evecs = torch.linalg.eigh(C)
W_zca = evecs @ torch.diag(1.0 / torch.sqrt(evals + 1e-5)) @ evecs.T
Z = Xc @ W_zca
L = torch.linalg.cholesky(C)
Z_chol = torch.linalg.solve_triangular(L, Xc.T, upper=False).T
whiteness = (torch.cov(Z.T) - torch.eye(d, dtype=X.dtype)).abs().max()
chol_whiteness = (torch.cov(Z_chol.T) - torch.eye(d, dtype=X.dtype)).abs().max()

# Orthogonal Procrustes: recover a rotation.
Q_true, _ = torch.linalg.qr(torch.from_numpy(rng.randn(d, d)))
B = Xc @ Q_true
u, _, vh = torch.linalg.svd(Xc.T @ B)
R = u @ vh
procrustes_err = (R - Q_true).abs().max()

# CCA through QR of the centred blocks.
Yc = Y - Y.mean(0)
Qx, _ = torch.linalg.qr(Xc)
Qy, _ = torch.linalg.qr(Yc)
canon = torch.linalg.svdvals(Qx.T @ Qy)

# Least squares three ways.
A = torch.cat([Xc, torch.ones(n, 1, dtype=X.dtype)], 1)
sol = torch.linalg.lstsq(A, Yc, driver="gelsd").solution
normal = torch.linalg.solve(A.T @ A, A.T @ Yc)
pinv_sol = torch.linalg.pinv(A) @ Yc
resid = torch.linalg.vector_norm(A @ sol - Yc)
# ... and by Householder QR as LAPACK-level code writes it: geqrf, Q^T Y by ormqr, then back substitution.
a_qr, tau = torch.geqrf(A)
qty = torch.ormqr(a_qr, tau, Yc, transpose=True)
beta_qr = torch.linalg.solve_triangular(a_qr[:A.shape[1]].triu(), qty[:A.shape[1]], upper=True)
Q_thin = torch.linalg.householder_product(a_qr, tau)

# Mahalanobis distances and conditioning.
L2, info = torch.linalg.cholesky_ex(C)
diff = (X - X.mean(0)).unsqueeze(-1)
maha = torch.cholesky_solve(diff, L2.expand(n, d, d)).squeeze(-1).mul(diff.squeeze(-1)).sum(-1).sqrt()
sign, logdet = torch.linalg.slogdet(C)

# A linear probe with an orthonormal weight kept on the Stiefel manifold by QR retraction.
torch.manual_seed(0)
W = torch.linalg.qr(torch.randn(d, 3, dtype=torch.float64)).Q.requires_grad_()
losses = []
for step in range(30):
    proj = Xc @ W
    loss = -proj.var(dim=0).sum()  # maximise captured variance
    loss.backward()
    with torch.no_grad():
        G = W.grad - W @ (W.T @ W.grad + W.grad.T @ W) / 2  # Riemannian gradient
        Qn, Rn = torch.linalg.qr(W - 0.05 * G)
        W.copy_(Qn * torch.sign(torch.diagonal(Rn)))
        W.grad = None
    losses.append(loss.item())
print(f"pc1_ratio={ratio[0].item():.8f}")
print(f"pc3_cum={ratio[:3].sum().item():.8f}")
print(f"lowrank_s_err={(S_lr - S[:3]).abs().max().item():.8f}")
print(f"recon_err={recon_err.item():.8f}")
print(f"zca_whiteness={whiteness.item():.8f}")
print(f"chol_whiteness={chol_whiteness.item():.8f}")
print(f"procrustes_err={procrustes_err.item():.8f}")
print(f"canon_corr1={canon[0].item():.8f}")
print(f"canon_corr_last={canon[-1].item():.8f}")
print(f"lstsq_vs_normal={(sol - normal).abs().max().item() * 1e6:.6f}")
print(f"lstsq_vs_pinv={(sol - pinv_sol).abs().max().item() * 1e6:.6f}")
print(f"resid={resid.item():.8f}")
print(f"qr_vs_lstsq={float(torch.allclose(beta_qr, sol, atol=1e-9))}")
print(f"qty_tail_norm={qty[A.shape[1]:].norm().item():.8f}")
q_orth_err = (Q_thin.T @ Q_thin - torch.eye(A.shape[1], dtype=A.dtype)).abs().max().item()
print(f"householder_q_orth={float(q_orth_err < 1e-12)}")
print(f"maha_mean={maha.mean().item():.8f}")
print(f"info={info.item()}")
print(f"logdet={logdet.item():.8f}")
print(f"rank={torch.linalg.matrix_rank(Xc[:, :4] @ torch.ones(4, 4, dtype=X.dtype)).item()}")
print(f"cond={torch.linalg.cond(C).item():.6f}")
print(f"initial_loss={losses[0]:.8f}")
print(f"final_loss={losses[-1]:.8f}")
print(f"captured_vs_pca={-losses[-1] / explained[:3].sum().item():.8f}")
