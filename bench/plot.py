"""bench/plot.py — PNG charts (matplotlib) of uslab bench's results (--plot DIR):
cycles per operation by size, per-object cost by bulk size, throughput and peak RSS
by workload, RSS over time after a peak, per-phase cycles of the concurrent test,
real programs against jemalloc."""
import os
import statistics

from memory import IDLE_CASES, IDLE_PEAK_MB

def plot(out, directory):
    """PNG charts of the results in `out` into directory; returns the files written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(directory, exist_ok=True)
    files = []

    def rss_over_time(ax, results, workload):
        """Each allocator's median run (by final RSS) of `workload`: RSS over time."""
        for key, rows in results.items():
            name, w = key.rsplit("/", 1)
            if w == workload:
                run = sorted(rows, key=lambda r: r["end_kib"])[len(rows) // 2]
                ax.plot([t / 1000 for t, _ in run["samples"]],
                        [kib / 1024 for _, kib in run["samples"]], label=name)

    def save(fig, name):
        path = os.path.join(directory, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)

    if "rss" in out:
        fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
        for ax, workload in zip(axes, ("peak", "frag")):
            rss_over_time(ax, out["rss"], workload)
            ax.set_xlabel("seconds")
            ax.set_ylabel("RSS (MiB)")
            ax.set_title({"peak": "256 MB peak, freed, then light activity",
                          "frag": "fragmentation phases, freed, then light activity"}[workload])
            ax.grid(True, alpha=0.3)
            ax.legend()
        save(fig, "rss.png")

    if "apps" in out:
        fig, axes = plt.subplots(1, 2, figsize=(15, 5.5))
        res = out["apps"]
        programs = sorted({k.rsplit("/", 1)[0] for k in res})
        allocators = [a for a in ("uslab", "mimalloc", "tcmalloc", "glibc")
                      if any(k.endswith("/" + a) for k in res)]
        width = 0.8 / max(1, len(allocators))
        for ax, (measure, label) in zip(axes, (("wall_s", "time"), ("peak_rss_mib", "peak RSS"))):
            for i, a in enumerate(allocators):
                vals = []
                for p in programs:
                    mine, jem = res.get(f"{p}/{a}"), res.get(f"{p}/jemalloc")
                    vals.append(statistics.median(r[measure] for r in mine) /
                                statistics.median(r[measure] for r in jem) if mine and jem else 0)
                ax.bar([j + i * width for j in range(len(programs))], vals, width, label=a)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(programs))])
            ax.set_xticklabels([p.split(" ")[0] for p in programs], rotation=30)
            ax.set_ylabel(f"{label} / jemalloc's")
            ax.set_title(f"real programs: {label} relative to jemalloc (lower is better)")
            ax.legend(fontsize=8)
        save(fig, "apps.png")

    if "idle" in out:
        fig, axes = plt.subplots(2, 2, figsize=(14, 9))
        for ax, workload in zip(axes.flat, IDLE_CASES):
            rss_over_time(ax, out["idle"], workload)
            ax.set_xlabel("seconds after the frees")
            ax.set_ylabel("RSS (MiB)")
            ax.set_yscale("log")
            ax.set_title(workload if workload == "redis-server" else
                         f"{IDLE_PEAK_MB} MB peak freed, then {workload}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        save(fig, "idle.png")

    if "micro" in out:
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
        for ax, test in zip(axes, ("N x alloc", "N x free", "alloc/free pair")):
            for alloc, res in out["micro"].items():
                pts = sorted((int(k.split("/")[-1]), statistics.median(m for _, m, _ in v))
                             for k, v in res.items() if k.rsplit("/", 1)[0] == test)
                ax.plot([s for s, _ in pts], [c for _, c in pts], marker="o", label=alloc)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel("cycles per operation (median)")
            ax.set_title(test)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend()
        save(fig, "micro.png")
    if "bulk" in out:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        series = {}
        for key, v in out["bulk"].items():
            alloc, test, n = key.split("/")
            series.setdefault(f"{alloc} {test}", []).append((int(n), statistics.median(v)))
        for label, pts in sorted(series.items()):
            pts.sort()
            ax.plot([n for n, _ in pts], [c for _, c in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("objects per bulk call")
        ax.set_ylabel("cycles per object (alloc + free)")
        ax.set_title("bulk alloc + free of 64-byte objects")
        ax.grid(True, alpha=0.3)
        ax.legend()
        save(fig, "bulk.png")
    for name, measure, unit, scale in (("threads", "ops_per_sec", "M operations/s", 1e-6),
                                       ("mem", "peak_rss_kib", "peak RSS (MiB)", 1 / 1024)):
        if name not in out:
            continue
        res = out[name]
        allocs = list(res)
        labels = list(res[allocs[0]])
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels) * len(allocs) / 3), 4.5))
        width = 0.8 / len(allocs)
        for i, alloc in enumerate(allocs):
            vals = [statistics.median(r[measure] for r in res[alloc][l]) * scale for l in labels]
            ax.bar([j + i * width for j in range(len(labels))], vals, width, label=alloc)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))])
        ax.set_xticklabels(labels, rotation=15)
        ax.set_ylabel(unit)
        ax.set_title(name)
        ax.legend()
        save(fig, f"{name}.png")
    if "concurrent" in out:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for ax, phase in zip(axes, ("alloc", "free")):
            for alloc in ("uslab", "jemalloc"):
                pts = sorted((int(k.split("/")[2]), statistics.median(v))
                             for k, v in out["concurrent"].items()
                             if k.startswith(f"{alloc}/{phase}/") and k.count("/") == 2)
                ax.plot([s for s, _ in pts], [c for _, c in pts], marker="o", label=alloc)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel("cycles per operation")
            ax.set_title(f"every CPU at once: N x {phase}")
            ax.grid(True, alpha=0.3)
            ax.legend()
        save(fig, "concurrent.png")
    return files
