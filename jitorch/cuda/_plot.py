"""``plot_snapshot``: the caching allocator's segments and blocks drawn as a picture (matplotlib).

Fragmentation is easier to see than to read from numbers: each segment becomes one horizontal bar, as wide as the
figure whatever its size (its size is in the label), cut into its blocks in address order and coloured by state.
"""
from __future__ import annotations

# Block state -> (legend label, colour). A free block is "inactive split" when its segment also holds other blocks:
# that is the memory fragmentation wastes (a whole free segment can go back to the driver; a split one cannot).
STATE_STYLE = {
    "active_allocated": ("allocated", "#3b75af"),
    "active_pending_free": ("freed, waiting on streams", "#ef8636"),
    "inactive_split": ("free, in a split segment", "#c53a32"),
    "inactive": ("free (whole segment)", "#b4b4b4"),
}
_MIN_LABEL_FRACTION = 0.08  # blocks narrower than this share of their bar are left unlabelled


def _size_text(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def block_kind(block, segment):
    """The drawn state of ``block``: its snapshot state, with free blocks of split segments set apart.

    >>> block_kind({"state": "inactive"}, {"blocks": [{}, {}]})
    'inactive_split'
    """
    state = block["state"]
    if state == "inactive" and len(segment["blocks"]) > 1:
        return "inactive_split"
    return state


def plot_snapshot(path=None, snapshot=None):
    """Draw ``snapshot`` (default: ``jitorch.cuda.memory_snapshot()``) and save it to ``path``; returns the Figure.

    One bar per segment, one rectangle per block: x is the block's offset in its segment as a fraction of the
    segment, colours follow :data:`STATE_STYLE`, and blocks wide enough carry their size. Each rectangle's ``gid`` is
    ``"<segment address>:<block address>"`` (hex) so programs can find the block a rectangle draws. ``snapshot`` may
    also be a ``{"segments": [...]}`` dict, as ``torch.cuda.memory._snapshot()`` returns. The format follows the
    extension of ``path`` (``.png``, ``.svg``, ``.pdf``); with ``path=None`` nothing is written.

    >>> from jitorch.runtime.allocator import CachingAllocator
    >>> from jitorch.runtime.driver import FakeDriver
    >>> alloc = CachingAllocator(FakeDriver())
    >>> keep = [alloc.malloc(300 << 10) for _ in range(4)]; alloc.free(keep[1])
    >>> fig = plot_snapshot(None, alloc.memory_snapshot())
    >>> len(fig.axes[0].patches)    # 3 allocated blocks, the freed one, and the segment's free tail
    5
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    if snapshot is None:
        from .memory import memory_snapshot

        snapshot = memory_snapshot()
    segments = snapshot["segments"] if isinstance(snapshot, dict) else list(snapshot)
    fig = Figure(figsize=(10, 1.2 + 0.45 * max(len(segments), 1)))
    ax = fig.add_subplot()
    labels = []
    for row, seg in enumerate(segments):
        total = seg["total_size"]
        for block in seg["blocks"]:
            kind = block_kind(block, seg)
            x = (block["address"] - seg["address"]) / total
            width = block["size"] / total
            rect = Rectangle((x, row - 0.4), width, 0.8, facecolor=STATE_STYLE[kind][1], edgecolor="white",
                             linewidth=0.8, gid=f"{seg['address']:#x}:{block['address']:#x}", label=kind)
            ax.add_patch(rect)
            if width >= _MIN_LABEL_FRACTION:
                ax.text(x + width / 2, row, _size_text(block["size"]), ha="center", va="center", fontsize=7,
                        color="white" if kind != "inactive" else "black", clip_on=True)
        labels.append(f"{seg['address']:#x} {seg.get('segment_type', '')} {_size_text(total)}"
                      f" (stream {seg.get('stream', 0)})")
    ax.set_xlim(0, 1)
    ax.set_ylim(max(len(segments), 1) - 0.5, -0.5)  # first segment on top
    ax.set_yticks(range(len(segments)), labels, fontsize=8)
    ax.set_xlabel("offset in segment (fraction of its size)")
    allocated = sum(b["size"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated")
    reserved = sum(s["total_size"] for s in segments)
    ax.set_title(f"{len(segments)} segments, {_size_text(reserved)} reserved, {_size_text(allocated)} allocated",
                 fontsize=10)
    ax.legend(handles=[Patch(facecolor=colour, label=label) for label, colour in STATE_STYLE.values()],
              loc="upper center", bbox_to_anchor=(0.5, -0.12 if segments else -0.2), ncol=4, fontsize=8,
              frameon=False)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path)
    return fig
