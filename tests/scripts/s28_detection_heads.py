"""Single-stage detector pieces (after torchvision's ops/boxes.py, RetinaNet and the YOLO/SSD repos): anchors from
meshgrid over feature strides, box IoU / GIoU with clamp(min=0), the Faster R-CNN box coder (encode/decode with
log and exp clamped by math.log(1000 / 16)), anchor-to-target matching by max IoU with low-quality matches,
sigmoid focal loss, smooth-L1 box regression on positives, a pure-torch greedy NMS loop and a batched NMS via
the coordinate-offset trick, and score filtering with topk.

Images are synthetic NumPy feature maps; training is deterministic, so metrics must match torch.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def box_area(boxes):
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_iou(boxes1, boxes2):
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    return inter / union, union


def generalized_box_iou(boxes1, boxes2):
    iou, union = box_iou(boxes1, boxes2)
    lti = torch.min(boxes1[:, None, :2], boxes2[:, :2])
    rbi = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])
    whi = (rbi - lti).clamp(min=0)
    areai = whi[:, :, 0] * whi[:, :, 1]
    return iou - (areai - union) / areai


def make_anchors(feat_h, feat_w, stride, sizes=(8.0, 16.0), ratios=(0.5, 1.0, 2.0)):
    scales = torch.as_tensor(sizes)
    aspect = torch.as_tensor(ratios)
    h_ratios = torch.sqrt(aspect)
    w_ratios = 1 / h_ratios
    ws = (w_ratios[:, None] * scales[None, :]).view(-1)
    hs = (h_ratios[:, None] * scales[None, :]).view(-1)
    base = torch.stack([-ws, -hs, ws, hs], dim=1) / 2
    shifts_x = torch.arange(0, feat_w, dtype=torch.int32) * stride
    shifts_y = torch.arange(0, feat_h, dtype=torch.int32) * stride
    shift_y, shift_x = torch.meshgrid(shifts_y, shifts_x, indexing="ij")
    shift_x, shift_y = shift_x.reshape(-1), shift_y.reshape(-1)
    shifts = torch.stack((shift_x, shift_y, shift_x, shift_y), dim=1)
    return (shifts.view(-1, 1, 4) + base.view(1, -1, 4)).reshape(-1, 4)


class BoxCoder:
    def __init__(self, weights=(1.0, 1.0, 1.0, 1.0), bbox_xform_clip=math.log(1000.0 / 16)):
        self.weights, self.clip = weights, bbox_xform_clip

    def encode(self, gt, anchors):
        wx, wy, ww, wh = self.weights
        aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
        ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
        gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
        gx, gy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
        return torch.stack((wx * (gx - ax) / aw, wy * (gy - ay) / ah,
                            ww * torch.log(gw / aw), wh * torch.log(gh / ah)), 1)

    def decode(self, rel, anchors):
        wx, wy, ww, wh = self.weights
        aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
        ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
        dx, dy = rel[:, 0::4] / wx, rel[:, 1::4] / wy
        dw, dh = (rel[:, 2::4] / ww).clamp(max=self.clip), (rel[:, 3::4] / wh).clamp(max=self.clip)
        cx, cy = dx * aw[:, None] + ax[:, None], dy * ah[:, None] + ay[:, None]
        w, h = torch.exp(dw) * aw[:, None], torch.exp(dh) * ah[:, None]
        return torch.stack((cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h), dim=2).flatten(1)


def match(iou, high=0.5, low=0.4, allow_low_quality=True):
    matched_vals, matches = iou.max(dim=0)
    all_matches = matches.clone()
    matches[matched_vals < low] = -1
    matches[(matched_vals >= low) & (matched_vals < high)] = -2
    if allow_low_quality:
        highest_quality, _ = iou.max(dim=1)
        gt_pred_pairs = torch.where(iou == highest_quality[:, None])
        pred_inds_to_update = gt_pred_pairs[1]
        matches[pred_inds_to_update] = all_matches[pred_inds_to_update]
    return matches


def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2.0, reduction="sum"):
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * loss).sum() if reduction == "sum" else (alpha_t * loss).mean()


def nms(boxes, scores, iou_threshold):
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0].item()
        keep.append(i)
        if order.numel() == 1:
            break
        ious, _ = box_iou(boxes[i].unsqueeze(0), boxes[order[1:]])
        order = order[1:][ious[0] <= iou_threshold]
    return torch.tensor(keep, dtype=torch.int64)


def batched_nms(boxes, scores, idxs, iou_threshold):
    max_coordinate = boxes.max()
    offsets = idxs.to(boxes) * (max_coordinate + torch.tensor(1).to(boxes))
    return nms(boxes + offsets[:, None], scores, iou_threshold)


class Head(nn.Module):
    def __init__(self, c, num_anchors, num_classes):
        super().__init__()
        self.cls = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.GroupNorm(4, c), nn.ReLU(),
                                 nn.Conv2d(c, num_anchors * num_classes, 3, padding=1))
        self.reg = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, num_anchors * 4, 3, padding=1))
        self.num_classes = num_classes

    def forward(self, feat):
        N, _, H, W = feat.shape
        cls = self.cls(feat).view(N, -1, self.num_classes, H, W).permute(0, 3, 4, 1, 2).reshape(N, -1, self.num_classes)
        reg = self.reg(feat).view(N, -1, 4, H, W).permute(0, 3, 4, 1, 2).reshape(N, -1, 4)
        return cls, reg


rng = np.random.RandomState(0)
head = Head(8, 6, 3)
with torch.no_grad():
    for n, p in head.named_parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.1).astype(np.float32)))
    nn.init.constant_(head.cls[-1].bias, -math.log((1 - 0.01) / 0.01))  # RetinaNet prior
feats = torch.from_numpy(rng.randn(2, 8, 6, 6).astype(np.float32))
anchors = make_anchors(6, 6, stride=8)
gt_boxes = [torch.tensor([[4.0, 4.0, 20.0, 18.0], [24.0, 10.0, 40.0, 34.0]]), torch.tensor([[10.0, 20.0, 30.0, 44.0]])]
gt_labels = [torch.tensor([0, 2]), torch.tensor([1])]
coder = BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))
opt = torch.optim.SGD(head.parameters(), lr=0.01, momentum=0.9)
losses = []
for it in range(30):
    cls_out, reg_out = head(feats)
    cls_loss, reg_loss, n_pos = 0.0, 0.0, 0
    for b in range(2):
        iou, _ = box_iou(gt_boxes[b], anchors)
        matches = match(iou)
        pos = matches >= 0
        valid = matches != -2
        target = torch.zeros_like(cls_out[b])
        target[pos, gt_labels[b][matches[pos]]] = 1.0
        cls_loss = cls_loss + sigmoid_focal_loss(cls_out[b][valid], target[valid])
        reg_t = coder.encode(gt_boxes[b][matches[pos]], anchors[pos])
        reg_loss = reg_loss + F.smooth_l1_loss(reg_out[b][pos], reg_t, beta=1 / 9, reduction="sum")
        n_pos += int(pos.sum())
    loss = (cls_loss + reg_loss) / max(1, n_pos)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(head.parameters(), 5.0)
    opt.step()
    losses.append(loss.item())

with torch.no_grad():
    cls_out, reg_out = head(feats)
    scores_all = cls_out[0].sigmoid().flatten()
    scores, topk_idx = scores_all.topk(40)
    anchor_idx, labels = topk_idx // 3, topk_idx % 3
    boxes = coder.decode(reg_out[0][anchor_idx], anchors[anchor_idx]).clamp(min=0, max=48)
    keep = batched_nms(boxes, scores, labels, 0.5)
    giou = generalized_box_iou(boxes[keep][:5], gt_boxes[0])
print(f"n_anchors={anchors.shape[0]}")
print(f"n_pos={n_pos}")
print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"n_keep={keep.numel()}")
print(f"keep_checksum={sum((i + 1) * k for i, k in enumerate(keep.tolist()))}")
print(f"top_score={scores[0].item():.6f}")
print(f"giou_sum={giou.sum().item():.5f}")
print(f"anchor_sum={anchors.sum().item():.3f}")
