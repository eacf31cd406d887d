"""bench/record.py — writes a run of uslab bench into bench/RESULTS.md (uslab bench
--record): each benchmark's table becomes the current one, in the section "### NAME"
under the run's machine ("## N CPUs"), headed by the machine, the date and the commit
(the table's own first line gives the command); the section it replaces moves to the
month's log in bench/history/ (newest first), so that RESULTS.md keeps one current
table per benchmark.

A section counts as a benchmark's when its heading, up to a colon or parenthesis,
names benchmarks only ("### threads", "### apps and suite", "### concurrent, firstuse
(Intel)"). Recording replaces every section whose benchmarks were all run; a section
that names a benchmark of the run together with one that was not run is refused
(split it by hand first), and nothing is written then."""
import os
import re
import sys

HEADING = re.compile(r"^### (.*)$")


def names_in(heading, known):
    """The benchmarks a section heading names, or None when it is not a benchmark's."""
    head = re.split(r"[:(]", heading, maxsplit=1)[0].strip()
    words = [w for w in re.split(r",\s*|\s+and\s+", head) if w]
    return set(words) if words and all(w in known for w in words) else None


def cpu_section(lines, cpus):
    """(start, end) line indices of the "## N CPUs" section (end exclusive); appended
    at the end of the file when there is none."""
    start = next((i for i, l in enumerate(lines) if re.match(rf"^## {cpus} CPUs\b", l)), None)
    if start is None:
        lines += ["", f"## {cpus} CPUs", ""]
        start = len(lines) - 2
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
               len(lines))
    return start, end


def sections(lines, start, end):
    """[(heading text, first line, end line)] of the ### sections in lines[start:end]."""
    heads = [i for i in range(start, end) if HEADING.match(lines[i])]
    return [(HEADING.match(lines[h]).group(1), h, heads[k + 1] if k + 1 < len(heads) else end)
            for k, h in enumerate(heads)]


def record(results, out, known):
    """Writes out["tables"] (benchmark -> Markdown, in run order) into the RESULTS.md
    at `results`, and what they replace into its bench/history/YYYY-MM.md."""
    meta, tables = out["meta"], out["tables"]
    run = set(tables)
    with open(results) as f:
        lines = f.read().split("\n")
    start, end = cpu_section(lines, meta["cpus"])
    replaced = []  # (first line, end line, the run's benchmarks it held)
    for heading, first, last in sections(lines, start, end):
        covered = names_in(heading, known)
        if not covered or not covered & run:
            continue
        if not covered <= run:
            sys.exit(f"uslab bench --record: '### {heading}' in {results} also holds "
                     f"{', '.join(sorted(covered - run))}, which this run did not measure: "
                     "split that section first; nothing was written")
        replaced.append((first, last, covered))
    provenance = f"Machine: {out['machine']}. {meta['date']}, commit {meta['commit']}."

    def written(names):
        text = []
        for name in (n for n in tables if n in names):  # each begins with its command
            # A table's own "### " headings (micro's three tables) go one level down,
            # so that the section still ends at the next benchmark's heading.
            body = [("#" + l if HEADING.match(l) else l) for l in tables[name].strip().split("\n")]
            text += [f"### {name}", "", provenance, ""] + body + [""]
        return text

    # New sections where the ones they replace were (bottom up: indices stay valid),
    # those of benchmarks without one at the end of the machine's part.
    placed = set().union(*(c for _, _, c in replaced))
    lines[end:end] = written(run - placed)
    old = ["\n".join(lines[a:b]).rstrip() for a, b, _ in replaced]
    for a, b, covered in reversed(replaced):
        lines[a:b] = written(covered)
    with open(results, "w") as f:
        f.write("\n".join(lines))
    if old:
        history = os.path.join(os.path.dirname(results), "history", meta["date"][:7] + ".md")
        log = open(history).read().split("\n") if os.path.exists(history) else [
            f"# Benchmark results: the log of every run, {meta['date'][:7]} (newest first; "
            "the current tables are in ../RESULTS.md)", ""]
        at = next((i for i, l in enumerate(log) if l.startswith("## ")), len(log))
        entry = [f"## {meta['date']}: replaced in RESULTS.md by {meta['commit']}'s run of "
                 f"{', '.join(tables)} ({meta['cpus']} CPUs)", ""] + "\n\n".join(old).split(
                     "\n") + [""]
        log[at:at] = entry
        with open(history, "w") as f:
            f.write("\n".join(log))
    return len(old)
