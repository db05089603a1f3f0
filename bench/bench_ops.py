"""Everyday ops, eager, forward and backward: jitorch against torch (CPU, one thread) on the same data.

Convolutions (1-D/2-D/3-D, transposed, depthwise), normalization layers, pooling and resampling, losses, indexing
(gather/scatter, embedding, index_select), sorting and selection, cumulative and counting ops, distances, attention,
recurrent layers, linear algebra and optimizer steps, at sizes a model or a data pipeline uses. A row is one case:
median milliseconds over interleaved samples, and jitorch/torch (< 1: jitorch is faster).

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_ops.py [name filters...]
"""
from __future__ import annotations

import sys

import common

common.single_thread()

import jitorch  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

common.single_thread()
rng = np.random.default_rng(0)


def arr(*s):
    return rng.standard_normal(s).astype(np.float32)


cases = {}


def case(name):
    def deco(fn):
        cases[name] = fn
        return fn
    return deco


@case("conv2d 64->64 3x3 16x32x32 fwd+bwd")
def _(L, x=arr(16,64,32,32)):
    L.manual_seed(0)
    m=L.nn.Conv2d(64,64,3,padding=1)
    X=L.tensor(x,requires_grad=True)
    G=L.tensor(arr(16,64,32,32))
    return lambda: m(X).backward(G)
@case("BatchNorm2d train 16x64x32x32 fwd+bwd")
def _(L, x=arr(16,64,32,32)):
    m=L.nn.BatchNorm2d(64)
    X=L.tensor(x,requires_grad=True)
    G=L.tensor(x)
    return lambda: m(X).backward(G)
@case("Embedding 10000x256 on 32x128 fwd+bwd")
def _(L):
    m=L.nn.Embedding(10000,256)
    I=L.tensor(rng.integers(0,10000,(32,128)))
    G=L.tensor(arr(32,128,256))
    return lambda: m(I).backward(G)
@case("LSTM 128->256 seq32 b16 fwd+bwd")
def _(L):
    m=L.nn.LSTM(128,256,batch_first=True)
    X=L.tensor(arr(16,32,128),requires_grad=True)
    G=L.tensor(arr(16,32,256))
    return lambda: m(X)[0].backward(G)
@case("cross_entropy 256x10000 fwd+bwd")
def _(L):
    X=L.tensor(arr(256,10000),requires_grad=True)
    Y=L.tensor(rng.integers(0,10000,256))
    return lambda: L.nn.functional.cross_entropy(X,Y).backward()
@case("GroupNorm(8,64) 16x64x32x32 fwd+bwd")
def _(L):
    m=L.nn.GroupNorm(8,64)
    X=L.tensor(arr(16,64,32,32),requires_grad=True)
    G=L.tensor(arr(16,64,32,32))
    return lambda: m(X).backward(G)
@case("interpolate bilinear x2 16x64x32x32 fwd+bwd")
def _(L):
    X=L.tensor(arr(16,64,32,32),requires_grad=True)
    G=L.tensor(arr(16,64,64,64))
    return lambda: L.nn.functional.interpolate(X,scale_factor=2,mode="bilinear",align_corners=False).backward(G)
@case("max_pool2d 2 16x64x32x32 fwd+bwd")
def _(L):
    X=L.tensor(arr(16,64,32,32),requires_grad=True)
    G=L.tensor(arr(16,64,16,16))
    return lambda: L.nn.functional.max_pool2d(X,2).backward(G)
@case("TransformerEncoderLayer d256 h8 s128 b8 fwd+bwd")
def _(L):
    L.manual_seed(0)
    m=L.nn.TransformerEncoderLayer(256,8,1024,dropout=0.0,batch_first=True)
    X=L.tensor(arr(8,128,256),requires_grad=True)
    G=L.tensor(arr(8,128,256))
    return lambda: m(X).backward(G)
@case("AdamW step 4M params (20 tensors)")
def _(L):
    ps=[L.nn.Parameter(L.tensor(arr(200,1000))) for _ in range(20)]
    for p in ps:
        p.grad = L.tensor(arr(200, 1000))
    o=L.optim.AdamW(ps,lr=1e-3)
    return lambda: o.step()
@case("gather+scatter_add 1M")
def _(L):
    X=L.tensor(arr(1000,1000))
    I=L.tensor(rng.integers(0,1000,(1000,1000)))
    return lambda: L.zeros(1000,1000).scatter_add_(1,I,X.gather(1,I))
@case("sort 1M + topk 1000")
def _(L):
    X=L.tensor(arr(1000,1000))
    return lambda: (X.sort(-1), X.topk(10,-1))
@case("cumsum 1000x1000 + boolean mask")
def _(L):
    X=L.tensor(arr(1000,1000))
    return lambda: (X.cumsum(1), X[X>0])
@case("bmm 64x128x64 @ 64x64x128 fwd+bwd")
def _(L):
    A=L.tensor(arr(64,128,64),requires_grad=True)
    B=L.tensor(arr(64,64,128),requires_grad=True)
    G=L.tensor(arr(64,128,128))
    return lambda: L.bmm(A,B).backward(G)
@case("einsum bhqd,bhkd->bhqk 8x8x128x64")
def _(L):
    A=L.tensor(arr(8,8,128,64))
    B=L.tensor(arr(8,8,128,64))
    return lambda: L.einsum("bhqd,bhkd->bhqk",A,B)
@case("grid_sample 16x64x32x32")
def _(L):
    X=L.tensor(arr(16,64,32,32),requires_grad=True)
    Gd=L.tensor(np.clip(arr(16,32,32,2),-1,1))
    G=L.tensor(arr(16,64,32,32))
    return lambda: L.nn.functional.grid_sample(X,Gd,align_corners=False).backward(G)
@case("ConvTranspose2d 64->32 4x4 s2 16x16x16")
def _(L):
    L.manual_seed(0)
    m=L.nn.ConvTranspose2d(64,32,4,2,1)
    X=L.tensor(arr(16,64,16,16),requires_grad=True)
    G=L.tensor(arr(16,32,32,32))
    return lambda: m(X).backward(G)
@case("depthwise conv 64ch 3x3 16x32x32 fwd+bwd")
def _(L):
    L.manual_seed(0)
    m=L.nn.Conv2d(64,64,3,padding=1,groups=64)
    X=L.tensor(arr(16,64,32,32),requires_grad=True)
    G=L.tensor(arr(16,64,32,32))
    return lambda: m(X).backward(G)
@case("conv1d 64->64 k5 b16 L512 fwd+bwd")
def _(L):
    L.manual_seed(0)
    m=L.nn.Conv1d(64,64,5,padding=2)
    X=L.tensor(arr(16,64,512),requires_grad=True)
    G=L.tensor(arr(16,64,512))
    return lambda: m(X).backward(G)
@case("conv3d 8->16 k3 b4 16^3 fwd+bwd")
def _(L):
    L.manual_seed(0)
    m=L.nn.Conv3d(8,16,3,padding=1)
    X=L.tensor(arr(4,8,16,16,16),requires_grad=True)
    G=L.tensor(arr(4,16,16,16,16))
    return lambda: m(X).backward(G)
@case("MultiheadAttention d256 h8 s128 b8 fwd+bwd")
def _(L):
    L.manual_seed(0)
    m=L.nn.MultiheadAttention(256,8,batch_first=True)
    X=L.tensor(arr(8,128,256),requires_grad=True)
    G=L.tensor(arr(8,128,256))
    return lambda: m(X,X,X,need_weights=False)[0].backward(G)
@case("F.pad reflect + unfold 16x64x32x32")
def _(L):
    X=L.tensor(arr(16,64,32,32))
    return lambda: L.nn.functional.unfold(L.nn.functional.pad(X,(1,1,1,1),mode="reflect"),3)
@case("where/clamp/masked_fill 1M")
def _(L):
    X=L.tensor(arr(1000,1000))
    M=X>0
    return lambda: (L.where(M,X,0.0), X.clamp(-0.5,0.5), X.masked_fill(M,1.0))
@case("argmax/max/logsumexp dim1 1000x1000")
def _(L):
    X=L.tensor(arr(1000,1000))
    return lambda: (X.argmax(1), X.max(1), X.logsumexp(1))
@case("F.normalize + cdist 1000x128 vs 500x128")
def _(L):
    A=L.tensor(arr(1000,128))
    B=L.tensor(arr(500,128))
    return lambda: L.cdist(L.nn.functional.normalize(A,dim=1),B)
@case("cdist p=1 1000x128 vs 500x128 fwd+bwd")
def _(L):
    A = L.tensor(arr(1000, 128), requires_grad=True)
    B = L.tensor(arr(500, 128))
    G = L.tensor(arr(1000, 500))
    return lambda: L.cdist(A, B, p=1.0).backward(G)


@case("stack 100 tensors of 100x100")
def _(L):
    ts = [L.tensor(arr(100, 100)) for _ in range(100)]
    return lambda: L.stack(ts)


@case("repeat_interleave + cat 100 tensors")
def _(L):
    X=L.tensor(arr(1000,100))
    ts=[L.tensor(arr(100,100)) for _ in range(100)]
    return lambda: (X.repeat_interleave(3,dim=0), L.cat(ts), L.stack(ts))
@case("BCEWithLogits + nll 1M")
def _(L):
    X=L.tensor(arr(1000,1000),requires_grad=True)
    Y=L.tensor((arr(1000,1000)>0).astype(np.float32))
    return lambda: L.nn.functional.binary_cross_entropy_with_logits(X,Y).backward()
@case("dropout train 1M fwd+bwd")
def _(L):
    X=L.tensor(arr(1000,1000),requires_grad=True)
    G=L.tensor(arr(1000,1000))
    return lambda: L.nn.functional.dropout(X,0.1,training=True).backward(G)
@case("GRU 128->256 seq32 b16 fwd+bwd")
def _(L):
    L.manual_seed(0)
    m=L.nn.GRU(128,256,batch_first=True)
    X=L.tensor(arr(16,32,128),requires_grad=True)
    G=L.tensor(arr(16,32,256))
    return lambda: m(X)[0].backward(G)
@case("avg_pool2d + adaptive_avg_pool 16x64x32x32 fwd+bwd")
def _(L):
    X=L.tensor(arr(16,64,32,32),requires_grad=True)
    return lambda: (L.nn.functional.avg_pool2d(X,2).sum()+L.nn.functional.adaptive_avg_pool2d(X,(7,7)).sum()).backward()
@case("LayerNorm 4096x1024 fwd+bwd")
def _(L):
    m=L.nn.LayerNorm(1024)
    X=L.tensor(arr(4096,1024),requires_grad=True)
    G=L.tensor(arr(4096,1024))
    return lambda: m(X).backward(G)
@case("RMSNorm 4096x1024 fwd+bwd")
def _(L):
    m=L.nn.RMSNorm(1024)
    X=L.tensor(arr(4096,1024),requires_grad=True)
    G=L.tensor(arr(4096,1024))
    return lambda: m(X).backward(G)
@case("silu/softplus/mish 1M fwd+bwd")
def _(L):
    X=L.tensor(arr(1000,1000),requires_grad=True)
    G=L.tensor(arr(1000,1000))
    F=L.nn.functional
    return lambda: (F.silu(X)+F.softplus(X)+F.mish(X)).backward(G)
@case("index_select dim1 1000x1000 -> 500")
def _(L):
    X=L.tensor(arr(1000,1000))
    I=L.tensor(rng.integers(0,1000,500))
    return lambda: X.index_select(1,I)
@case("unique + bincount + histc 1M")
def _(L):
    I=L.tensor(rng.integers(0,1000,1000000))
    X=L.tensor(arr(1000000))
    return lambda: (L.unique(I), L.bincount(I), L.histc(X,100))
@case("batched inverse/solve 256x16x16")
def _(L):
    A=L.tensor(arr(256,16,16)+np.eye(16,dtype=np.float32)*4)
    B=L.tensor(arr(256,16,4))
    return lambda: (L.linalg.inv(A), L.linalg.solve(A,B))
@case("svd 64x64 x32")
def _(L):
    A=L.tensor(arr(32,64,64))
    return lambda: L.linalg.svd(A)
@case("sum dim0 of transposed 1000x1000 + t().contiguous()")
def _(L):
    X=L.tensor(arr(1000,1000))
    return lambda: (X.t().sum(0), X.t().contiguous())
@case("x.mean/var over (0,2,3) 16x64x32x32")
def _(L):
    X=L.tensor(arr(16,64,32,32))
    return lambda: (X.mean((0,2,3)), X.var((0,2,3)))
@case("topk 1M k=100 + kthvalue")
def _(L):
    X=L.tensor(arr(1000000))
    return lambda: (X.topk(100), X.kthvalue(500000))
@case("pixel_shuffle + interpolate nearest 16x64x32x32")
def _(L):
    X=L.tensor(arr(16,64,32,32))
    return lambda: (L.nn.functional.pixel_shuffle(X,2), L.nn.functional.interpolate(X,scale_factor=2,mode="nearest"))
@case("embedding_bag mean 10000x64, 4096 bags")
def _(L):
    E=L.nn.EmbeddingBag(10000,64,mode="mean")
    I=L.tensor(rng.integers(0,10000,16384))
    O=L.tensor(np.arange(0,16384,4))
    return lambda: E(I,O).sum().backward()


def _built(build, lib, seed):
    """``build(lib)`` with the draws its body makes seeded alike for both libraries: the same data (sort keys,
    masks, indices) in each, as the module says."""
    global rng
    rng = np.random.default_rng(seed)
    return build(lib)


def main():
    filters = sys.argv[1:]
    rows = []
    for seed, (name, build) in enumerate(cases.items()):
        if filters and not any(f in name for f in filters):
            continue
        print(f"  {name} ...", flush=True)
        try:
            timings = common.measure({"jitorch": _built(build, jitorch, seed), "torch": _built(build, torch, seed)},
                                     repeats=7, target_s=0.05)
        except Exception as exc:  # a case one library cannot run is reported, not fatal
            rows.append({"case": name, "error": f"{type(exc).__name__}: {str(exc)[:120]}"})
            continue
        j, t = timings["jitorch"]["median_s"] * 1e3, timings["torch"]["median_s"] * 1e3
        rows.append({"case": name, "jitorch_ms": j, "torch_ms": t, "ratio": j / t})
    columns = [("case", "case", ""), ("jitorch (ms)", "jitorch_ms", ".3f"), ("torch (ms)", "torch_ms", ".3f"),
               ("jitorch/torch", "ratio", ".2f")]
    notes = ("Median milliseconds per call over 7 interleaved samples of ~0.05 s, one thread for both libraries "
             "(BLAS too). jitorch/torch < 1: jitorch is faster. The machine is shared: ratios, not absolute times.")
    common.report("ops", rows, columns, notes, jitorch=jitorch.__version__, torch=torch.__version__)


if __name__ == "__main__":
    main()
