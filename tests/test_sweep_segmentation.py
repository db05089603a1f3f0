"""Semantic-segmentation research code, written once against ``lib`` and run with torch and jitorch: a U-Net whose
decoder upsamples by ``ConvTranspose2d`` or ``F.interpolate`` (``align_corners`` both ways) and pads odd skips,
BatchNorm trained and then evaluated, ``CrossEntropyLoss`` with class weights and ``ignore_index`` on (N, C, H, W)
logits, soft Dice through ``one_hot(...).permute``, focal loss, a confusion matrix and IoU through ``bincount``,
the Lovász-softmax loss (a descending ``sort`` of the errors, ``cumsum``, a slice written from its own shift),
``ReduceLROnPlateau`` on the validation loss, and a DeepLab-style ASPP head (dilated convs, image pooling by
``AdaptiveAvgPool2d``) under ``PolynomialLR``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match, copy_weights

CLASSES, IGNORE = 4, 255


def make_unet(lib, up="transpose", align_corners=True, base=8):
    nn, F = lib.nn, lib.nn.functional

    def double_conv(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    class Up(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            if up == "transpose":
                self.up = nn.ConvTranspose2d(cin, cin // 2, kernel_size=2, stride=2)
                self.conv = double_conv(cin, cout)
            else:
                self.up = None
                self.conv = double_conv(cin + cin // 2, cout)

        def forward(self, x, skip):
            if self.up is not None:
                x = self.up(x)
            else:
                x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=align_corners)
            dy, dx = skip.size(2) - x.size(2), skip.size(3) - x.size(3)  # odd sizes: pad as the U-Net repo does
            x = F.pad(x, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
            return self.conv(lib.cat([skip, x], dim=1))

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inc = double_conv(3, base)
            self.down1 = nn.Sequential(nn.MaxPool2d(2), double_conv(base, 2 * base))
            self.down2 = nn.Sequential(nn.MaxPool2d(2), double_conv(2 * base, 4 * base))
            self.up1 = Up(4 * base, 2 * base)
            self.up2 = Up(2 * base, base)
            self.outc = nn.Conv2d(base, CLASSES, kernel_size=1)

        def forward(self, x):
            x1 = self.inc(x)
            x2 = self.down1(x1)
            x3 = self.down2(x2)
            return self.outc(self.up2(self.up1(x3, x2), x1))

    return UNet()


def make_deeplab(lib, rates=(2, 3), ch=16):
    nn, F = lib.nn, lib.nn.functional

    class ASPPPooling(nn.Sequential):
        def __init__(self, cin, cout):
            super().__init__(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU())

        def forward(self, x):
            size = x.shape[-2:]
            for mod in self:
                x = mod(x)
            return F.interpolate(x, size=size, mode="bilinear", align_corners=False)

    class ASPP(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            mods = [nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())]
            for r in rates:
                mods.append(nn.Sequential(nn.Conv2d(cin, cout, 3, padding=r, dilation=r, bias=False),
                                          nn.BatchNorm2d(cout), nn.ReLU()))
            mods.append(ASPPPooling(cin, cout))
            self.convs = nn.ModuleList(mods)
            self.project = nn.Sequential(nn.Conv2d(len(mods) * cout, cout, 1, bias=False), nn.BatchNorm2d(cout),
                                         nn.ReLU(), nn.Dropout(0.0))

        def forward(self, x):
            return self.project(lib.cat([conv(x) for conv in self.convs], dim=1))

    class DeepLab(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(nn.Conv2d(3, ch, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(ch),
                                          nn.ReLU(inplace=True), nn.Conv2d(ch, ch, 3, padding=2, dilation=2),
                                          nn.ReLU(inplace=True))
            self.aspp = ASPP(ch, ch)
            self.classifier = nn.Conv2d(ch, CLASSES, 1)

        def forward(self, x):
            out = self.classifier(self.aspp(self.backbone(x)))
            return F.interpolate(out, size=x.shape[-2:], mode="bilinear", align_corners=False)

    return DeepLab()


def scenes(n=4, size=(17, 19), seed=0):
    """Images of blobs whose class is their colour; a border band is unlabelled (``IGNORE``)."""
    rng = np.random.default_rng(seed)
    h, w = size
    yy, xx = np.mgrid[:h, :w]
    labels = np.zeros((n, h, w), np.int64)
    for i in range(n):
        for c in range(1, CLASSES):
            cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(2, 6)
            labels[i][(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = c
    palette = rng.uniform(-1, 1, (CLASSES, 3))
    imgs = palette[labels].transpose(0, 3, 1, 2) + 0.3 * rng.normal(size=(n, 3, h, w))
    labels[:, :, :1] = IGNORE
    labels[:, -1, :] = IGNORE
    return imgs.astype(np.float32), labels


def soft_dice_loss(lib, logits, target, eps=1.0):
    F = lib.nn.functional
    valid = (target != IGNORE).unsqueeze(1)
    probs = F.softmax(logits, dim=1) * valid
    one_hot = F.one_hot(target.masked_fill(~valid.squeeze(1), 0), CLASSES).permute(0, 3, 1, 2).float() * valid
    dims = (0, 2, 3)
    inter = (probs * one_hot).sum(dims)
    card = probs.sum(dims) + one_hot.sum(dims)
    return 1 - ((2 * inter + eps) / (card + eps)).mean()


def focal_loss(lib, logits, target, gamma=2.0, alpha=None):
    ce = lib.nn.functional.cross_entropy(logits, target, weight=alpha, reduction="none", ignore_index=IGNORE)
    pt = lib.exp(-ce)
    valid = target != IGNORE
    return ((1 - pt) ** gamma * ce)[valid].mean()


def lovasz_grad(gt_sorted):
    """The Lovász extension's gradient of the Jaccard loss at the sorted errors (Berman et al.'s code)."""
    p = len(gt_sorted)
    gts = gt_sorted.sum()
    intersection = gts - gt_sorted.float().cumsum(0)
    union = gts + (1 - gt_sorted).float().cumsum(0)
    jaccard = 1.0 - intersection / union
    if p > 1:
        jaccard[1:p] = jaccard[1:p] - jaccard[0:-1]
    return jaccard


def lovasz_softmax(lib, logits, labels):
    C = logits.size(1)
    probas = lib.nn.functional.softmax(logits, dim=1).permute(0, 2, 3, 1).contiguous().view(-1, C)
    labels = labels.view(-1)
    valid = labels != IGNORE
    probas, labels = probas[valid.nonzero().squeeze()], labels[valid]
    losses = []
    for c in range(C):
        fg = (labels == c).float()
        if fg.sum() == 0:  # classes='present'
            continue
        errors_sorted, perm = lib.sort((fg - probas[:, c]).abs(), 0, descending=True)
        losses.append(lib.dot(errors_sorted, lovasz_grad(fg[perm])))
    return lib.stack(losses).mean()


def confusion_matrix(lib, pred, target, n=CLASSES):
    k = (target >= 0) & (target < n)
    return lib.bincount(n * target[k] + pred[k], minlength=n ** 2).reshape(n, n)


def iou_metrics(lib, conf):
    conf = conf.double()
    inter = lib.diag(conf)
    union = conf.sum(0) + conf.sum(1) - inter
    iou = inter / union
    return {"iou": iou, "miou": lib.nanmean(iou), "acc": inter.sum() / conf.sum(),
            "fw_iou": (conf.sum(1) / conf.sum() * iou)[conf.sum(1) > 0].sum()}


def class_weights(lib, target):
    """Median-frequency balancing from the training labels."""
    counts = lib.bincount(target[target != IGNORE].flatten(), minlength=CLASSES).float()
    freq = counts / counts.sum()
    return freq.median() / freq.clamp(min=1e-6)


def seg_run(lib, ref, make, loss_kind, steps=5, sched="plateau", **kw):
    imgs, labels = scenes()
    val_imgs, val_labels = scenes(2, seed=1)
    model = make(lib, **kw)
    copy_weights(ref, model)
    x, y = lib.tensor(imgs), lib.tensor(labels)
    weights = class_weights(lib, y)
    criterion = lib.nn.CrossEntropyLoss(weight=weights, ignore_index=IGNORE)
    opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    if sched == "plateau":
        scheduler = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=1,
                                                             threshold=1e-3, threshold_mode="abs", min_lr=0.01)
    else:
        scheduler = lib.optim.lr_scheduler.PolynomialLR(opt, total_iters=steps, power=0.9)
    out = {"loss": [], "val_loss": [], "lr": [], "weights": weights}
    for _ in range(steps):
        model.train()
        opt.zero_grad()
        logits = model(x)
        if loss_kind == "ce_dice":
            loss = criterion(logits, y) + soft_dice_loss(lib, logits, y)
        else:
            loss = focal_loss(lib, logits, y, alpha=weights) + 0.5 * soft_dice_loss(lib, logits, y)
        loss.backward()
        opt.step()
        out["loss"].append(loss.detach())
        model.eval()
        with lib.no_grad():
            val_logits = model(lib.tensor(val_imgs))
            val_loss = criterion(val_logits, lib.tensor(val_labels))
        out["val_loss"].append(val_loss)
        scheduler.step(val_loss) if sched == "plateau" else scheduler.step()
        out["lr"].append(opt.param_groups[0]["lr"])
    out["grads"] = {n: p.grad for n, p in model.named_parameters()}
    out["state"] = model.state_dict()  # running means/vars and num_batches_tracked included
    with lib.no_grad():
        pred = val_logits.argmax(1)
        conf = confusion_matrix(lib, pred, lib.tensor(val_labels))
    out["conf"] = conf
    out["metrics"] = iou_metrics(lib, conf)
    out["val_logits"] = val_logits
    return out


@pytest.mark.parametrize("up,align_corners,loss_kind", [("transpose", True, "ce_dice"),
                                                       ("bilinear", True, "focal_dice"),
                                                       ("bilinear", False, "ce_dice")])
def test_unet_training_matches_torch(up, align_corners, loss_kind):
    torch.manual_seed(0)
    ref = make_unet(torch, up=up, align_corners=align_corners)
    kw = dict(up=up, align_corners=align_corners)
    th = seg_run(torch, ref, make_unet, loss_kind, **kw)
    jt = seg_run(jitorch, ref, make_unet, loss_kind, **kw)
    assert_runs_match(th, jt, rtol=1e-4, atol=1e-5, what=f"unet {up} {align_corners} {loss_kind}")


@pytest.mark.parametrize("sched,loss_kind", [("plateau", "ce_dice"), ("poly", "focal_dice")])
def test_deeplab_aspp_training_matches_torch(sched, loss_kind):
    torch.manual_seed(1)
    ref = make_deeplab(torch)
    th = seg_run(torch, ref, make_deeplab, loss_kind, sched=sched)
    jt = seg_run(jitorch, ref, make_deeplab, loss_kind, sched=sched)
    assert_runs_match(th, jt, rtol=1e-4, atol=1e-5, what=f"deeplab {sched}")


def test_losses_and_metrics_on_fixed_logits():
    """The losses' gradients with random upstream weights, and the metrics with empty classes (NaN IoU)."""
    rng = np.random.default_rng(3)
    logits_np = rng.normal(size=(2, CLASSES, 5, 6)).astype(np.float32)
    target_np = rng.integers(0, CLASSES - 1, (2, 5, 6))  # the last class never appears: its IoU is 0/0
    target_np[0, 0, :3] = IGNORE
    logits_np[1, :, :2, :3] = 0.5  # uniform probabilities: tied errors, which the unstable sort orders its way
    pred_np = rng.integers(0, CLASSES - 1, (2, 5, 6))
    res = []
    for lib in LIBS:
        logits = lib.tensor(logits_np, requires_grad=True)
        target = lib.tensor(target_np)
        w = lib.tensor([0.5, 1.0, 2.0, 1.5])
        losses = [lib.nn.CrossEntropyLoss(weight=w, ignore_index=IGNORE)(logits, target),
                  lib.nn.CrossEntropyLoss(weight=w, ignore_index=IGNORE, label_smoothing=0.1)(logits, target),
                  lib.nn.CrossEntropyLoss(ignore_index=IGNORE, reduction="sum")(logits, target),
                  soft_dice_loss(lib, logits, target), focal_loss(lib, logits, target, alpha=w),
                  focal_loss(lib, logits, target, gamma=0.5), lovasz_softmax(lib, logits, target)]
        grads = [lib.autograd.grad(loss, logits)[0] for loss in losses]
        conf = confusion_matrix(lib, lib.tensor(pred_np), target)
        res.append([losses, grads, conf, iou_metrics(lib, conf)])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="segmentation losses")
    assert np.isnan(res[1][3]["iou"].numpy()[-1])
