#!/usr/bin/env python3
"""test/bench/record_test.py — uslab bench --record (bench/record.py) on a made-up
RESULTS.md: a benchmark's section is replaced in place and the old one moves to the
month's history, newest first; a combined section is replaced when the run covers it
all and refused (nothing written) when it does not; a benchmark without a section gets
one at the end of its machine's part; a table's own headings go one level below its
section's; other machines' parts and sections that are not
a benchmark's stay as they were. Exit 0 when every check holds."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from record import record  # noqa: E402

KNOWN = {"micro", "threads", "rss", "bulk", "mem", "falseshare"}
RESULTS = """# Benchmark results

Intro.

## 2 CPUs

### Before and after: micro and threads (a one-off)

old one-off

### micro

old micro table

### threads and rss

old threads and rss

### bulk (Intel)

old bulk

## 16 CPUs (2026-11-26)

### micro

sixteen-CPU micro
"""
HISTORY = """# Benchmark results: the log of every run, 2026-11

Intro of the log.

## 2026-11-20: an older entry

older
"""
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run(tables, results):
    out = {"machine": "Test CPU, 2 CPUs", "tables": tables,
           "meta": {"date": "2026-11-26", "commit": "abc1234", "cpus": 2}}
    return record(results, out, KNOWN)


with tempfile.TemporaryDirectory() as tmp:
    os.makedirs(os.path.join(tmp, "history"))
    results = os.path.join(tmp, "RESULTS.md")
    history = os.path.join(tmp, "history", "2026-11.md")
    with open(results, "w") as f:
        f.write(RESULTS)
    with open(history, "w") as f:
        f.write(HISTORY)

    # micro and bulk: replaced where they were; mem is new: at the end of "## 2 CPUs".
    moved = run({"micro": "Command: m\n\n### N x alloc\n\nnew micro table\n", "bulk": "Command: b\n\nnew bulk\n",
                 "mem": "Command: x\n\nnew mem\n"}, results)
    text = open(results).read()
    log = open(history).read()
    check(moved == 2, f"two sections moved, not {moved}")
    check("old micro table" not in text and "new micro table" in text, "micro replaced")
    check(text.index("### micro") < text.index("### threads and rss") < text.index("### bulk"),
          "replaced sections keep their places")
    check(text.index("new mem") < text.index("## 16 CPUs"), "a new section in its machine's part")
    check("sixteen-CPU micro" in text, "another machine's section untouched")
    check("\n#### N x alloc\n" in text and "\n### N x alloc" not in text,
          "a table's own heading one level below its section's")
    check("old one-off" in text, "a section that is not a benchmark's untouched")
    check("Machine: Test CPU, 2 CPUs. 2026-11-26, commit abc1234." in text, "provenance")
    check(log.index("## 2026-11-26") < log.index("## 2026-11-20"), "history newest first")
    check("old micro table" in log and "old bulk" in log, "the replaced sections in the history")
    check(log.startswith("# Benchmark results: the log"), "the history's title kept")

    # threads alone: its section also holds rss: refused, nothing written.
    before_text, before_log = open(results).read(), open(history).read()
    try:
        run({"threads": "Command: t\n\nnew threads\n"}, results)
        check(False, "a partial combined section refused")
    except SystemExit as e:
        check("split that section first" in str(e), f"the refusal says why: {e}")
    check(open(results).read() == before_text and open(history).read() == before_log,
          "nothing written on a refusal")

    # threads and rss together: the combined section becomes two.
    run({"threads": "Command: t\n\nnew threads\n", "rss": "Command: r\n\nnew rss\n"}, results)
    text = open(results).read()
    check("### threads and rss" not in text and "### threads\n" in text and "### rss\n" in text,
          "a combined section replaced by one per benchmark")
    check(text.index("### threads\n") < text.index("### bulk"), "in the combined one's place")

for f in failures:
    print(f"FAIL: {f}")
print(f"record: {'all checks pass' if not failures else f'{len(failures)} failed'}")
sys.exit(1 if failures else 0)
