#!/usr/bin/python3
"""Plots a benchmark's JSON output as a PNG (docs/perf/).

    scripts/plot-bench.py KIND IN.json OUT.png

KIND and the JSON it reads:
  route    exaserve-bench route --mode sim|live: P99 TTFT and P99 end-to-end latency per policy
           against load (rho), and, when there are two or more policies and loads, a heat map of
           each policy's P99 e2e over token-aware's.
  weights  exaserve-bench weights: pull throughput against parallel streams, for the pull from
           the warm peer and the split-cores pull, beside their bounds and 0.7 of them.
  engine   exaserve-bench engine (CPU: "decode": [{batch, tokens_per_s}]) or scripts/gpu-check.sh
           ("decode_tokens_per_s": {batch: tokens_per_s}): decode tokens/s against batch size.
  gossip   exaserve-sim gossip: p50 / p99 / max of detection and dissemination times per
           scenario (one JSON object, an array of them, or several runs appended to one file).
  cluster  exaserve-sim cluster: the bring-up waves (replicas per wave, started to ready) and,
           for a fault scenario, when it struck and when rebuilds ran.
  releases exaserve-sim cluster --scenario canary-*: each stage's decision, with each metric's
           value on the old and the new version over the stage's window.
  prefix-report
           exaserve-bench prefix-report, one run per reporting schedule appended to one file:
           the cached-block deltas' bytes per second and their share of the load stream plus
           gossip, per schedule.
  prefix-share
           exaserve-bench engine --prefix-share (runs appended to one file): P50 TTFT and
           prefill tokens computed with the prefix cache off and on, per run.
  soak     exaserve-bench soak: requests answered and failed per window, P99 latency per
           window and each node's resident memory over the run, the faults marked.
  ci       scripts/ctest-times.py's JSON: the recorded CI runs' total time, and the slowest
           tests of the latest run.

Needs python3-matplotlib (scripts/setup-deps.sh installs it). Writes nothing but OUT.png.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 100


def load(path):
    """One JSON document, or several one after another (JSON lines, or pretty-printed runs
    appended to one file): a list when there is more than one."""
    with open(path) as f:
        text = f.read()
    decoder, docs, pos = json.JSONDecoder(), [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        doc, pos = decoder.raw_decode(text, pos)
        docs.append(doc)
    if not docs:
        fail(f"{path}: no JSON")
    return docs if len(docs) > 1 else docs[0]


def fail(message):
    sys.exit(f"plot-bench: {message}")


def plot_route(data, out):
    results = data.get("results") if isinstance(data, dict) else None
    if not results:
        fail("route: no 'results' (expected exaserve-bench route --mode sim|live output)")
    policies = list(dict.fromkeys(r["policy"] for r in results))
    rhos = sorted({r["rho"] for r in results})
    by = {(r["policy"], r["rho"]): r for r in results}
    grid = len(policies) > 1 and len(rhos) > 1 and "token-aware" in policies
    fig, axes = plt.subplots(1, 3 if grid else 2, figsize=(13 if grid else 9, 3.8), dpi=DPI)
    for ax, key, title in ((axes[0], "ttft_ms", "P99 time to first token"),
                           (axes[1], "e2e_ms", "P99 end-to-end latency")):
        for p in policies:
            xs = [rho for rho in rhos if (p, rho) in by]
            ys = [by[(p, rho)][key]["p99"] / (1000.0 if key == "e2e_ms" else 1.0) for rho in xs]
            ax.plot(xs, ys, marker="o", label=p, linewidth=2 if p == "token-aware" else 1)
        ax.set_xlabel("load ρ (offered rate ÷ capacity)")
        ax.set_ylabel("ms" if key == "ttft_ms" else "s")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if grid:
        others = [p for p in policies if p != "token-aware"]
        m = [[by[(p, r)]["e2e_ms"]["p99"] / by[("token-aware", r)]["e2e_ms"]["p99"]
              if (p, r) in by and ("token-aware", r) in by else float("nan") for r in rhos]
             for p in others]
        ax = axes[2]
        im = ax.imshow(m, cmap="RdYlGn", vmin=0.8, vmax=1.2, aspect="auto")
        ax.set_xticks(range(len(rhos)), [f"{r:g}" for r in rhos])
        ax.set_yticks(range(len(others)), others)
        for i, row in enumerate(m):
            for j, v in enumerate(row):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xlabel("load ρ")
        ax.set_title("P99 e2e ÷ token-aware (> 1: token-aware better)")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(f"exaserve-bench route --mode {data.get('mode', '?')}", fontsize=10)
    return fig


def _streams(d):
    return sorted(d, key=lambda s: int(s))


def plot_weights(data, out):
    fig, ax = plt.subplots(figsize=(7, 4), dpi=DPI)
    plotted = False
    peer = data.get("pull_from_peer") or {}
    if peer.get("gbps_by_streams"):
        xs = _streams(peer["gbps_by_streams"])
        line, = ax.plot([int(s) for s in xs], [peer["gbps_by_streams"][s] for s in xs],
                        marker="o", label="(b) one process: peer and node share the cores")
        if peer.get("bound_gbps"):
            ax.axhline(0.7 * peer["bound_gbps"], color=line.get_color(), linestyle=":",
                       label=f"0.7 × its bound of {peer['bound_gbps']:.2f} GB/s")
        plotted = True
    split = data.get("pull_split_cores") or {}
    if split.get("by_streams"):
        xs = _streams(split["by_streams"])
        line, = ax.plot([int(s) for s in xs], [split["by_streams"][s]["gbps_median"] for s in xs],
                        marker="s", label="(d) split cores: peer on one CPU, node on another")
        if split.get("bound_gbps"):
            ax.axhline(0.7 * split["bound_gbps"], color=line.get_color(), linestyle="--",
                       label=f"0.7 × its bound of {split['bound_gbps']:.2f} GB/s")
        if split.get("diagnostic_disk_write_gbps"):
            ax.axhline(split["diagnostic_disk_write_gbps"], color="grey", linestyle="-.",
                       label=f"disk O_DIRECT write ({split['diagnostic_disk_write_gbps']:.2f} GB/s)")
        plotted = True
    if not plotted:
        fail("weights: neither pull_from_peer.gbps_by_streams nor pull_split_cores.by_streams")
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
    ax.set_xlabel("parallel streams")
    ax.set_ylabel("GB/s (verified and written)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    cold = data.get("rack_cold_start") or {}
    note = f"; rack cold start origin_bytes_ratio {cold['origin_bytes_ratio']:.2f}" \
        if "origin_bytes_ratio" in cold else ""
    ax.set_title("exaserve-bench weights: pull throughput" + note, fontsize=10)
    return fig


def plot_engine(data, out):
    points = []
    if isinstance(data.get("decode"), list):
        points = [(d["batch"], d["tokens_per_s"]) for d in data["decode"]]
        source = f"exaserve-bench engine ({data.get('backend', 'cpu')})"
    elif isinstance(data.get("decode_tokens_per_s"), dict):
        points = [(int(b), v) for b, v in data["decode_tokens_per_s"].items()]
        source = "scripts/gpu-check.sh (cuda)"
    if not points:
        fail("engine: no 'decode' list nor 'decode_tokens_per_s' map")
    points.sort()
    fig, ax = plt.subplots(figsize=(6.5, 4), dpi=DPI)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    ax.plot(xs, ys, marker="o", label="decode")
    ax.plot(xs, [ys[0] * x / xs[0] for x in xs], linestyle=":", color="grey",
            label="linear in batch (from batch 1)")
    for x, y in points:
        ax.annotate(f"{y:,.0f}", (x, y), textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("batch size (sequences decoding together)")
    ax.set_ylabel("tokens/s")
    eff = data.get("decode_bw_efficiency")
    ax.set_title(source + (f"; batch-1 decode at {eff:.2f} of copy bandwidth" if eff else ""),
                 fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def _scenario_name(r):
    s = r.get("scenario", {})
    parts = [f"N={s.get('nodes')}"]
    if s.get("kill"):
        parts.append(f"kill {s['kill']}")
    if s.get("loss"):
        parts.append(f"{100 * s['loss']:g}% loss")
    if s.get("pause_nodes"):
        parts.append(f"pause {s.get('pause_s')}s")
    if s.get("partition_s"):
        parts.append(f"partition {s['partition_s']}s")
    parts.append(f"seed {s.get('seed')}")
    return ", ".join(parts)


def plot_gossip(data, out):
    runs = data if isinstance(data, list) else [data]
    metrics = [("suspect_first_s", "first suspicion"), ("dead_confirmed_s", "death confirmed"),
               ("dead_everywhere_s", "dead everywhere"), ("dissemination_s", "dissemination")]
    fig, axes = plt.subplots(1, len(runs), figsize=(max(6.5, 4.2 * len(runs)), 4), dpi=DPI,
                             squeeze=False)
    for ax, r in zip(axes[0], runs):
        width = 0.27
        for k, (q, shade) in enumerate((("p50", 0.9), ("p99", 0.6), ("max", 0.35))):
            vals = [((r.get(m) or {}).get(q) or 0.0) for m, _ in metrics]
            ax.bar([i + (k - 1) * width for i in range(len(metrics))], vals, width,
                   label=q, color=plt.cm.Blues(shade))
        ax.set_xticks(range(len(metrics)), [label for _, label in metrics], fontsize=8,
                      rotation=15)
        ax.set_ylabel("seconds after the event")
        ax.set_title(f"{_scenario_name(r)}\nfalse deaths {r.get('false_deaths', '?')}, "
                     f"{r.get('msgs_per_node_per_s', '?')} msgs/node/s", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("exaserve-sim gossip: detection and dissemination", fontsize=10)
    return fig


def plot_cluster(data, out):
    runs = data if isinstance(data, list) else [data]
    fig, axes = plt.subplots(len(runs), 1, figsize=(7.5, 1.2 + 1.6 * len(runs)), dpi=DPI,
                             squeeze=False)
    for ax, r in zip(axes[:, 0], runs):
        waves = r.get("waves") or []
        if not waves:
            fail("cluster: no 'waves'")
        for w in waves:
            ax.barh(w["wave"], w["ready_s"] - w["started_s"], left=w["started_s"],
                    color=plt.cm.Blues(0.7))
            ax.annotate(f"{w['replicas']}", (w["ready_s"], w["wave"]), textcoords="offset points",
                        xytext=(3, -3), fontsize=7)
        fault = r.get("fault") or {}
        if fault.get("at_s") is not None:
            ax.axvline(fault["at_s"], color="red", linestyle=":", label="fault")
        rebuilds = fault.get("rebuilds") or {}
        if rebuilds.get("first_s") is not None:
            ax.axvspan(rebuilds["first_s"], rebuilds["last_s"] or rebuilds["first_s"],
                       color="orange", alpha=0.3, label="rebuilds")
        ax.invert_yaxis()
        ax.set_ylabel("wave")
        sc = r.get("scenario", {})
        ax.set_title(f"{sc.get('name')}, {sc.get('nodes')} nodes, seed {sc.get('seed')}: "
                     f"{r.get('replicas_placed')} replicas, all ready at {r.get('all_ready_s')} s"
                     f" (bars: wave started → ready, replicas at the end)", fontsize=8)
        ax.grid(alpha=0.3, axis="x")
        if fault:
            ax.legend(fontsize=7, loc="lower right")
    axes[-1, 0].set_xlabel("simulated seconds")
    return fig


def plot_releases(data, out):
    runs = data if isinstance(data, list) else [data]
    rows = []
    for r in runs:
        ro = r.get("rollout") or fail("releases: no 'rollout'")
        for d in ro.get("decisions", []):
            for m in d.get("metrics", []):
                ratio = m["new"] / m["old"] if m["old"] else (1.0 if m["new"] == m["old"] else 0)
                rows.append((f"{r['scenario'].get('name')} seed {r['scenario'].get('seed')}, stage "
                             f"{d['stage']} ({d['decision']} at {d['at_s']:.0f} s): {m['metric']}",
                             ratio, m["old"], m["new"], m.get("regressed")))
    if not rows:
        fail("releases: no stage decisions (run with a --duration long enough for one)")
    fig, ax = plt.subplots(figsize=(7.5, 1.5 + 0.45 * len(rows)), dpi=DPI)
    for i, (label, ratio, old, new, regressed) in enumerate(rows):
        ax.barh(i, ratio, 0.6, color="tab:red" if regressed else plt.cm.Blues(0.7))
        ax.annotate(f"{new:.4g} vs {old:.4g}", (ratio, i), textcoords="offset points",
                    xytext=(4, -3), fontsize=7)
    ax.axvline(1.0, color="grey", linestyle=":")
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("new version / old version over the stage's window (red: regressed)")
    ax.set_title("exaserve-sim cluster: each rollout stage's metrics, new against old",
                 fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return fig


def plot_prefix_report(data, out):
    runs = data if isinstance(data, list) else [data]
    if not runs or "cache_delta_bytes_per_s" not in runs[0]:
        fail("prefix-report: no 'cache_delta_bytes_per_s'")

    def schedule(r):
        k = r["report_every_blocks"]
        cap = r.get("report_max_every_blocks", k)
        if cap == k:
            return f"every {k}\n({16 * k} tokens)"
        return f"every {k}, widening\nto every {cap}"
    fig, ax = plt.subplots(figsize=(6.5, 4), dpi=DPI)
    ax.bar(range(len(runs)), [100 * r["cache_share_of_gossip_and_load_stream"] for r in runs],
           color=plt.cm.Blues(0.7), label="cache deltas / (load stream + gossip)")
    for i, r in enumerate(runs):
        ax.annotate(f"{r['cache_delta_bytes_per_s']:,.0f} B/s", (i, 100 *
                    r["cache_share_of_gossip_and_load_stream"]), textcoords="offset points",
                    xytext=(0, 3), ha="center", fontsize=8)
    ax.axhline(5, linestyle=":", color="grey", label="5 %")
    ax.set_xticks(range(len(runs)), [schedule(r) for r in runs], fontsize=7)
    ax.set_xlabel("blocks of a chain reported (16-token blocks)")
    ax.set_ylabel("% of the node's load stream + gossip")
    r0 = runs[0]
    ax.set_title(f"exaserve-bench prefix-report: {r0.get('replicas')} replicas, "
                 f"{r0.get('requests')} requests, load stream "
                 f"{r0['load_stream_bytes_per_s_without_cache']:,.0f} B/s", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return fig


def plot_prefix_share(data, out):
    runs = data if isinstance(data, list) else [data]
    if not runs or "prefix_cache" not in runs[0]:
        fail("prefix-share: no 'prefix_cache'")
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.8), dpi=DPI)
    labels = [f"share {r.get('prefix_share')}, run {i + 1}" for i, r in enumerate(runs)]
    for ax, (field, title) in zip(axes, (("ttft_p50_ms", "P50 TTFT (ms)"),
                                         ("prefill_tokens_computed", "prefill tokens computed"))):
        width = 0.38
        for k, (side, shade) in enumerate((("off", 0.4), ("on", 0.8))):
            ax.bar([i + (k - 0.5) * width for i in range(len(runs))],
                   [r["prefix_cache"][side][field] for r in runs], width,
                   label=f"cache {side}", color=plt.cm.Blues(shade))
        ax.set_xticks(range(len(runs)), labels, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"exaserve-bench engine --prefix-share ({runs[0].get('backend')}, "
                 f"{runs[0].get('prompt_tokens')}-token prompts)", fontsize=10)
    return fig


def plot_soak(data, out):
    if not isinstance(data, dict) or "timeline" not in data:
        fail("soak: no 'timeline' (exaserve-bench soak prints one)")
    rows = data["timeline"]
    fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), dpi=DPI, sharex=True)
    t = [r["start_s"] / 60 for r in rows]
    width = (t[1] - t[0]) if len(t) > 1 else 1 / 6
    ax = axes[0]
    ax.bar(t, [r["answered"] for r in rows], width=width, align="edge",
           color=plt.cm.Blues(0.6), label="answered")
    ax.bar(t, [r["errors"] + r["hangs"] for r in rows], width=width, align="edge",
           color=plt.cm.Reds(0.7), label="explicit errors + hangs")
    ax.set_ylabel("requests per window")
    ax.set_yscale("symlog")
    ax.legend(fontsize=8, loc="lower right")
    axes[1].plot(t, [max(1, r["latency_p99_ms"]) for r in rows], marker=".", color="black")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("P99 latency (ms)")
    nodes = sorted({n for r in rows for n in r.get("rss_kb", {})})
    for i, node in enumerate(nodes):
        ys = [r.get("rss_kb", {}).get(node) for r in rows]
        axes[2].plot(t, [y / 1024 if y is not None else None for y in ys], label=node,
                     color=plt.cm.tab10(i % 10))
    axes[2].set_ylabel("resident memory (MiB)")
    axes[2].set_xlabel("minutes into the run")
    axes[2].legend(fontsize=7, ncol=3)
    for ax in axes:
        for f in data.get("faults", []):
            ax.axvline(f["at_s"] / 60, color="red" if f["action"] != "pause" else "orange",
                       alpha=0.4, linewidth=1)
        ax.grid(alpha=0.3)
    req = data.get("requests", {})
    fig.suptitle(f"exaserve-bench soak: {req.get('total', 0):,} requests, "
                 f"{req.get('hangs', 0)} hangs; faults marked (orange: pause, red: kill -9)",
                 fontsize=10)
    return fig


def plot_ci(data, out):
    if not isinstance(data, dict) or "runs" not in data:
        fail("ci: no 'runs' (scripts/ctest-times.py writes them)")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5), dpi=DPI,
                             gridspec_kw={"width_ratios": [1, 1.4]})
    runs = data["runs"]
    ax = axes[0]
    ax.bar(range(len(runs)), [r["total_s"] / 60 for r in runs], color=plt.cm.Blues(0.6))
    ax.axhline(45, linestyle=":", color="grey", label="45 min: the project's budget")
    ax.axhline(90, linestyle="--", color="red", label="90 min: CI's limit")
    ax.set_xticks(range(len(runs)), [f"{r['date'][5:]} {r['commit']}" for r in runs],
                  fontsize=6, rotation=60, ha="right")
    ax.set_ylabel("clean clone to tests passed (min)")
    ax.set_title("recorded CI runs, 2 cores", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    latest = data.get("latest", {})
    tests = sorted(latest.get("tests", []), key=lambda x: -x["seconds"])[:15]
    ax = axes[1]
    ax.barh(range(len(tests)), [x["seconds"] for x in tests], color=plt.cm.Oranges(0.6))
    ax.set_yticks(range(len(tests)), [x["name"] for x in tests], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    total = sum(x["seconds"] for x in latest.get("tests", []))
    ax.set_title(f"the slowest tests at {latest.get('commit', '?')} "
                 f"({len(latest.get('tests', []))} tests, {total:,.0f} s in all)", fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    return fig


KINDS = {"route": plot_route, "weights": plot_weights, "engine": plot_engine,
         "gossip": plot_gossip, "cluster": plot_cluster, "releases": plot_releases,
         "prefix-report": plot_prefix_report,
         "prefix-share": plot_prefix_share, "soak": plot_soak, "ci": plot_ci}


def main(argv):
    if len(argv) != 4 or argv[1] not in KINDS:
        sys.exit(__doc__)
    kind, in_path, out_path = argv[1:]
    fig = KINDS[kind](load(in_path), out_path)
    fig.tight_layout()
    fig.savefig(out_path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    print(f"plot-bench: wrote {out_path}")


if __name__ == "__main__":
    main(sys.argv)
