"""Object-detection research code in plain tensor ops (torchvision's algorithms, no torchvision), written once
against ``lib`` and run with torch and jitorch: box IoU/GIoU by broadcasting with ``clamp``, anchors on
``meshgrid(indexing='ij'/'xy')`` grids, box encoding/decoding, anchor matching with low-quality matches, sigmoid focal
loss, smooth L1 / L1 / GIoU box losses, a hand-written NMS (``argsort``/``sort``/``topk`` and boolean masks, batched
by coordinate offsets). RoI pooling, the FPN and a RetinaNet trained on these helpers are in
`test_sweep_detection_retina`."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sweep_helpers import LIBS, assert_runs_match

BBOX_CLIP = math.log(1000.0 / 16)


def box_area(boxes):
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_iou(lib, boxes1, boxes2):
    """(IoU, union), each (N, M)."""
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = lib.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = lib.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    return inter / union, union


def generalized_box_iou(lib, boxes1, boxes2):
    iou, union = box_iou(lib, boxes1, boxes2)
    lti = lib.min(boxes1[:, None, :2], boxes2[:, :2])
    rbi = lib.max(boxes1[:, None, 2:], boxes2[:, 2:])
    whi = (rbi - lti).clamp(min=0)
    areai = whi[:, :, 0] * whi[:, :, 1]
    return iou - (areai - union) / areai


def giou_loss(lib, boxes1, boxes2, eps=1e-7):
    """torchvision's elementwise ``generalized_box_iou_loss`` (reduction 'none')."""
    x1, y1, x2, y2 = boxes1.unbind(dim=-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)
    xkis1, ykis1 = lib.max(x1, x1g), lib.max(y1, y1g)
    xkis2, ykis2 = lib.min(x2, x2g), lib.min(y2, y2g)
    intsctk = lib.zeros_like(x1)
    mask = (ykis2 > ykis1) & (xkis2 > xkis1)
    intsctk[mask] = (xkis2[mask] - xkis1[mask]) * (ykis2[mask] - ykis1[mask])
    unionk = (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - intsctk
    iouk = intsctk / (unionk + eps)
    area_c = (lib.max(x2, x2g) - lib.min(x1, x1g)) * (lib.max(y2, y2g) - lib.min(y1, y1g))
    return 1 - (iouk - ((area_c - unionk) / (area_c + eps)))


def cell_anchors(lib, sizes, ratios):
    scales = lib.as_tensor(sizes, dtype=lib.float32)
    ratios = lib.as_tensor(ratios, dtype=lib.float32)
    h_ratios = lib.sqrt(ratios)
    w_ratios = 1 / h_ratios
    ws = (w_ratios[:, None] * scales[None, :]).view(-1)
    hs = (h_ratios[:, None] * scales[None, :]).view(-1)
    return (lib.stack([-ws, -hs, ws, hs], dim=1) / 2).round()


def grid_anchors(lib, feat_sizes, strides, base_anchors, indexing="ij"):
    anchors = []
    for (h, w), (sy, sx), base in zip(feat_sizes, strides, base_anchors):
        shifts_x = lib.arange(0, w, dtype=lib.int32) * sx
        shifts_y = lib.arange(0, h, dtype=lib.int32) * sy
        if indexing == "ij":
            shift_y, shift_x = lib.meshgrid(shifts_y, shifts_x, indexing="ij")
        else:  # 'xy' gives (h, w) grids from (x, y): the same anchors, in the same row-major order
            shift_x, shift_y = lib.meshgrid(shifts_x, shifts_y, indexing="xy")
        shift_x, shift_y = shift_x.reshape(-1), shift_y.reshape(-1)
        shifts = lib.stack((shift_x, shift_y, shift_x, shift_y), dim=1)
        anchors.append((shifts.view(-1, 1, 4) + base.view(1, -1, 4)).reshape(-1, 4))
    return lib.cat(anchors)


def encode(lib, gt, anchors, weights=(1.0, 1.0, 1.0, 1.0)):
    wx, wy, ww, wh = weights
    ex_w, ex_h = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    ex_x, ex_y = anchors[:, 0] + 0.5 * ex_w, anchors[:, 1] + 0.5 * ex_h
    gt_w, gt_h = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    gt_x, gt_y = gt[:, 0] + 0.5 * gt_w, gt[:, 1] + 0.5 * gt_h
    return lib.stack((wx * (gt_x - ex_x) / ex_w, wy * (gt_y - ex_y) / ex_h, ww * lib.log(gt_w / ex_w),
                      wh * lib.log(gt_h / ex_h)), dim=1)


def decode(lib, rel_codes, boxes, weights=(1.0, 1.0, 1.0, 1.0)):
    boxes = boxes.to(rel_codes.dtype)
    widths, heights = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    ctr_x, ctr_y = boxes[:, 0] + 0.5 * widths, boxes[:, 1] + 0.5 * heights
    wx, wy, ww, wh = weights
    dx, dy = rel_codes[:, 0::4] / wx, rel_codes[:, 1::4] / wy
    dw = lib.clamp(rel_codes[:, 2::4] / ww, max=BBOX_CLIP)
    dh = lib.clamp(rel_codes[:, 3::4] / wh, max=BBOX_CLIP)
    pred_ctr_x, pred_ctr_y = dx * widths[:, None] + ctr_x[:, None], dy * heights[:, None] + ctr_y[:, None]
    pred_w, pred_h = lib.exp(dw) * widths[:, None], lib.exp(dh) * heights[:, None]
    c_to_c_h = lib.tensor(0.5, dtype=pred_ctr_y.dtype) * pred_h
    c_to_c_w = lib.tensor(0.5, dtype=pred_ctr_x.dtype) * pred_w
    return lib.stack((pred_ctr_x - c_to_c_w, pred_ctr_y - c_to_c_h, pred_ctr_x + c_to_c_w, pred_ctr_y + c_to_c_h),
                     dim=2).flatten(1)


def match(lib, quality, high=0.5, low=0.4, allow_low_quality=True):
    """torchvision's ``Matcher``: ``quality`` is (gt, anchors); -1 below ``low``, -2 between the thresholds."""
    matched_vals, matches = quality.max(dim=0)
    all_matches = matches.clone() if allow_low_quality else None
    below = matched_vals < low
    between = (matched_vals >= low) & (matched_vals < high)
    matches[below] = -1
    matches[between] = -2
    if allow_low_quality:
        highest, _ = quality.max(dim=1)
        pairs = lib.where(quality == highest[:, None])
        matches[pairs[1]] = all_matches[pairs[1]]
    return matches


def sigmoid_focal_loss(lib, inputs, targets, alpha=0.25, gamma=2.0, reduction="sum"):
    F = lib.nn.functional
    p = lib.sigmoid(inputs)
    ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    return loss.sum() if reduction == "sum" else loss.mean() if reduction == "mean" else loss


def nms(lib, boxes, scores, iou_threshold):
    """The greedy loop: the best remaining box suppresses those that overlap it more than the threshold."""
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        iou, _ = box_iou(lib, boxes[i].unsqueeze(0), boxes[order[1:]])
        order = order[1:][iou[0] <= iou_threshold]
    return lib.stack(keep) if keep else lib.empty(0, dtype=lib.int64)


def nms_matrix(lib, boxes, scores, iou_threshold):
    """The same by a suppression mask over the sorted IoU matrix (one pass in Python over the boxes)."""
    _, order = lib.sort(scores, descending=True, stable=True)
    iou, _ = box_iou(lib, boxes[order], boxes[order])
    suppressed = lib.zeros(len(order), dtype=lib.bool)
    for i in range(len(order)):
        if suppressed[i]:
            continue
        suppressed |= (iou[i] > iou_threshold) & (lib.arange(len(order)) > i)
    return order[~suppressed]


def batched_nms(lib, boxes, scores, idxs, iou_threshold):
    """Per-class NMS in one call: each class's boxes are moved out of the others' reach."""
    if boxes.numel() == 0:
        return lib.empty((0,), dtype=lib.int64)
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    return nms(lib, boxes + offsets[:, None], scores, iou_threshold)


def random_boxes(rng, n, size=40.0):
    xy = rng.uniform(0, size * 0.7, (n, 2))
    wh = rng.uniform(4, size * 0.4, (n, 2))
    return np.concatenate([xy, xy + wh], 1).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_box_iou_giou_and_losses_match_torch(dtype):
    rng = np.random.default_rng(0)
    b1, b2 = random_boxes(rng, 7).astype(dtype), random_boxes(rng, 5).astype(dtype)
    b2[0] = b1[0]  # identical boxes: IoU exactly 1
    b2[1] = [100, 100, 110, 120]  # disjoint from everything: IoU 0, the clamp's flat side
    g_iou, g_giou = rng.normal(size=(7, 5)).astype(dtype), rng.normal(size=(7, 5)).astype(dtype)
    pairs = random_boxes(rng, 6).astype(dtype)
    res = []
    for lib in LIBS:
        F = lib.nn.functional
        x1, x2 = lib.tensor(b1, requires_grad=True), lib.tensor(b2, requires_grad=True)
        iou, _ = box_iou(lib, x1, x2)
        giou = generalized_box_iou(lib, x1, x2)
        grads = lib.autograd.grad((iou * lib.tensor(g_iou)).sum() + (giou * lib.tensor(g_giou)).sum(), (x1, x2))
        p, t = lib.tensor(b1[:6], requires_grad=True), lib.tensor(pairs)
        losses = [giou_loss(lib, p, t), F.smooth_l1_loss(p, t, beta=1 / 9, reduction="none"),
                  F.l1_loss(p, t, reduction="none"), lib.diag(generalized_box_iou(lib, p, t))]
        loss_grads = [lib.autograd.grad(loss, p, lib.ones_like(loss) * (i + 1))[0] for i, loss in enumerate(losses)]
        res.append([iou, giou, grads, losses, loss_grads])
    tol = 1e-5 if dtype == "float32" else 1e-12
    assert_runs_match(*res, rtol=tol, atol=tol, what="box iou")


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_anchors_encode_decode_and_matching(indexing):
    feat_sizes, strides = [(6, 5), (3, 3), (2, 2)], [(8, 8), (16, 16), (32, 32)]
    rng = np.random.default_rng(1)
    gt_np = random_boxes(rng, 4, 48)
    gt_np[3] = [70, 70, 75, 75]  # overlaps few anchors: its best anchor is a low-quality match
    # large enough for dw/dh to reach the clip
    deltas_np = rng.normal(scale=3, size=(6 * sum(h * w for h, w in feat_sizes), 4)).astype(np.float32)
    res = []
    for lib in LIBS:
        base = [cell_anchors(lib, (s, s * 1.26), (0.5, 1.0, 2.0)) for s in (16, 32, 64)]
        anchors = grid_anchors(lib, feat_sizes, strides, base, indexing)
        gt = lib.tensor(gt_np)
        quality, _ = box_iou(lib, gt, anchors)
        matches = match(lib, quality)
        strict = match(lib, quality, allow_low_quality=False)
        fg = matches >= 0
        targets = encode(lib, gt[matches[fg]], anchors[fg])
        back = decode(lib, targets, anchors[fg])
        res.append([base, anchors, matches, strict, targets, back, decode(lib, lib.tensor(deltas_np), anchors)])
    assert_runs_match(*res, rtol=1e-5, atol=1e-4, what=f"anchors {indexing}")
    jt = res[1]
    np.testing.assert_allclose(jt[5].numpy(), gt_np[jt[2].numpy()[jt[2].numpy() >= 0]], rtol=1e-5, atol=1e-3)
    assert (jt[2].numpy() == -2).any() and (jt[2].numpy() >= 0).sum() > (jt[3].numpy() >= 0).sum()


def test_nms_variants_and_postprocessing():
    rng = np.random.default_rng(2)
    centers = rng.uniform(10, 50, (6, 2))
    boxes_np = np.concatenate([np.concatenate([c - 8, c + 8]) + rng.normal(scale=1.5, size=(5, 4))
                               for c in centers]).astype(np.float32)  # clusters of five overlapping boxes
    logits_np = rng.normal(size=(30, 3)).astype(np.float32)
    res = []
    for lib in LIBS:
        boxes, logits = lib.tensor(boxes_np), lib.tensor(logits_np)
        scores_all = lib.sigmoid(logits)
        scores, labels = scores_all.max(dim=1)
        flat = scores_all.flatten()
        keep_idxs = flat > 0.3
        topk_scores, topk = flat[keep_idxs].topk(min(20, int(keep_idxs.sum())))
        anchor_idx = lib.nonzero(keep_idxs).squeeze(1)[topk]
        box_idx = lib.div(anchor_idx, 3, rounding_mode="floor")
        cls = anchor_idx % 3
        keep = batched_nms(lib, boxes[box_idx], topk_scores, cls, 0.5)[:10]
        # Quantized scores tie: an unstable argsort orders ties as it likes (torch: std::sort; jitorch: stably), so
        # the tied case goes through the stable sort of nms_matrix.
        coarse = (scores * 4).round() / 4
        out = [nms(lib, boxes, scores, 0.5), nms_matrix(lib, boxes, scores, 0.5), nms(lib, boxes, scores, 0.0),
               nms(lib, boxes[:0], scores[:0], 0.5), nms_matrix(lib, boxes, coarse, 0.3), keep, boxes[box_idx][keep],
               topk_scores[keep], cls[keep]]
        clipped = boxes.clone()
        clipped[..., 0::2] = clipped[..., 0::2].clamp(min=0, max=48)
        clipped[..., 1::2] = clipped[..., 1::2].clamp(min=0, max=40)
        small = ((clipped[:, 2] - clipped[:, 0]) >= 12) & ((clipped[:, 3] - clipped[:, 1]) >= 12)
        res.append(out + [clipped, lib.where(small)[0]])
    assert_runs_match(*res, rtol=1e-6, atol=1e-6, what="nms")
    np.testing.assert_array_equal(np.sort(res[1][0].numpy()), np.sort(res[1][1].numpy()))
