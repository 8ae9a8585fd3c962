#!/usr/bin/python3
"""Draws docs/images/roles.svg: ExaServe's roles and the flows between them
(docs/architecture.md#roles, docs/architecture.md#flows).

    python3 docs/images/roles.py docs/images/roles.svg

Needs python3-matplotlib. The output is deterministic (no date, fixed ids), so a rerun
without changes leaves the file as it is.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

plt.rcParams["svg.fonttype"] = "none"  # text stays text: small and searchable
plt.rcParams["svg.hashsalt"] = "exaserve-roles"
plt.rcParams["font.family"] = "DejaVu Sans"

# name: (x, y, width, height, fill, title, lines)
BOXES = {
    "client": (0.2, 6.3, 3.4, 1.0, "#eeeeee", "clients", ["gRPC Inference, OpenAI HTTP API"]),
    "operator": (7.7, 6.3, 3.0, 1.0, "#eeeeee", "operator", ["exaserve-cli, systemd"]),
    "gateway": (0.3, 4.2, 3.0, 1.3, "#dbe9f6", "gateway",
                ["token-aware router", "auth, retries, version routes"]),
    "scheduler": (7.7, 4.2, 3.0, 1.3, "#fde9d4", "scheduler",
                  ["spec store (replicated)", "placement, rollout, reconciler"]),
    "inference": (3.6, 1.9, 3.8, 1.5, "#dff0d8", "inference",
                  ["node agent: replicas", "(engine + KV cache), probes", "load stream"]),
    "storage": (7.7, 0.2, 3.0, 1.2, "#efe3f3", "storage",
                ["rack weight cache", "origin (--origin-dir)"]),
    "observer": (0.3, 0.2, 3.0, 1.2, "#fbf3c9", "observer",
                 ["scrapes /metrics", "evaluates alerts"]),
}

# (from, to, label, label position offset, style)
ARROWS = [
    ("client", "gateway", "requests, token streams", (0.1, 0.0), "-|>"),
    ("gateway", "inference", "Node.Generate", (-0.55, 0.1), "-|>"),
    ("inference", "gateway", "WatchLoad 10–50 Hz", (0.9, -0.25), "-|>"),
    ("operator", "scheduler", "apply -f spec.yaml", (0.1, 0.0), "-|>"),
    ("scheduler", "inference", "Start/StopReplica", (0.6, 0.15), "-|>"),
    ("inference", "storage", "weight chunks\n(local → rack → origin)", (1.45, 0.2), "<|-"),
    ("observer", "inference", "scrape every member", (-1.2, 0.35), "-|>"),
]


def center(name):
    x, y, w, h, *_ = BOXES[name]
    return x + w / 2, y + h / 2


def edge_point(name, toward):
    """Where the line from this box's centre toward `toward` leaves the box."""
    x, y, w, h, *_ = BOXES[name]
    cx, cy = center(name)
    dx, dy = toward[0] - cx, toward[1] - cy
    scale = min((w / 2) / abs(dx) if dx else 1e9, (h / 2) / abs(dy) if dy else 1e9)
    return cx + dx * scale, cy + dy * scale


def main(out_path):
    fig, ax = plt.subplots(figsize=(8.2, 5.6))
    ax.set_xlim(0, 11)
    ax.set_ylim(-0.6, 7.5)
    ax.axis("off")
    for name, (x, y, w, h, fill, title, lines) in BOXES.items():
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05,rounding_size=0.15",
                                    facecolor=fill, edgecolor="#555555", linewidth=1))
        ax.text(x + w / 2, y + h - 0.25, title, ha="center", va="center", fontsize=11,
                fontweight="bold")
        for i, line in enumerate(lines):
            ax.text(x + w / 2, y + h - 0.6 - 0.3 * i, line, ha="center", va="center", fontsize=8.5)
    # Parallel Generate / WatchLoad arrows: offset them sideways so both show.
    offsets = {("gateway", "inference"): -0.18, ("inference", "gateway"): 0.18}
    for src, dst, label, (lx, ly), style in ARROWS:
        a = edge_point(src, center(dst))
        b = edge_point(dst, center(src))
        off = offsets.get((src, dst), 0.0)
        a, b = (a[0] + off, a[1] + off), (b[0] + off, b[1] + off)
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle=style, mutation_scale=12, linewidth=1.2,
                                     color="#333333", shrinkA=2, shrinkB=2))
        mx, my = (a[0] + b[0]) / 2 + lx, (a[1] + b[1]) / 2 + ly
        ax.text(mx, my, label, fontsize=8, ha="center", va="center", color="#222222",
                bbox=dict(facecolor="white", edgecolor="none", pad=1, alpha=0.85))
    ax.text(5.5, -0.4, "every node: one exaserved · SWIM gossip membership · /metrics /healthz /readyz"
            " · roles pinned with --role or elected", ha="center", va="center", fontsize=8.5,
            style="italic", color="#444444")
    fig.tight_layout()
    fig.savefig(out_path, metadata={"Date": None, "Creator": None})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/images/roles.svg")
