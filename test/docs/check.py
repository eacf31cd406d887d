#!/usr/bin/env python3
"""test/docs/check.py SRC — the parts of docs/DESIGN.md that restate the code, read
against it: the lock table (its ranks, in the order of core/platform/lock_table.h's
LockRank, and the files it names), the header's own table of the same locks (ranks in
order, files, and the classes whose lock it names), and the folders of core/ (each
named in DESIGN.md's map). Prints every difference; exit 1 on any."""
import pathlib
import re
import sys

src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
header = (src / "core/platform/lock_table.h").read_text()
design = (src / "docs/DESIGN.md").read_text()
bad = []

enum = re.search(r"enum class LockRank[^{]*\{(.*?)\};", header, re.S).group(1)
ranks = [r for r in re.findall(r"\b(k\w+)\b", enum) if r != "kNone"]
code = [p for d in ("core", "preload", "compat") for p in (src / d).rglob("*")
        if p.suffix in (".h", ".cc")]
# A file may be named by its name, its path under core/, or its path.
names = set()
for p in code:
    rel = p.relative_to(src).as_posix()
    names |= {p.name, rel, rel.removeprefix("core/")}
text = "\n".join(p.read_text() for p in code)


def same_order(where, listed):
    if listed != ranks:
        missing = [r for r in ranks if r not in listed]
        extra = [r for r in listed if r not in ranks]
        bad.append(f"{where}: ranks differ from LockRank (missing {missing}, unknown {extra}, "
                   f"or out of order)")


# docs/DESIGN.md: | kA, kB (per CPU) | file, file | guards |
rows = re.findall(r"^\| (k[^|]*)\|([^|]*)\|", design, re.M)
listed = []
for rank_cell, files in rows:
    listed += re.findall(r"\b(k\w+)\b", rank_cell)
    for f in re.split(r",\s*", files.strip()):
        if f and f not in names:
            bad.append(f"docs/DESIGN.md lock table: {f} ({rank_cell.strip()}) does not exist")
same_order("docs/DESIGN.md lock table", listed)

# lock_table.h's comment: //   kRank   file what::lock_ — guards
entries = re.findall(r"^//   (k\w+)\s+(\S+)\s+([^\n—]*)", header, re.M)
same_order("lock_table.h's table", [e[0] for e in entries])
for rank, f, lock in entries:
    if f not in names:
        bad.append(f"lock_table.h's table: {f} ({rank}) does not exist")
    for cls in re.findall(r"\b([A-Z]\w+)::\w+", lock):
        if not re.search(rf"\b(class|struct)\s+(alignas\(\d+\)\s+)?{cls}\b", text):
            bad.append(f"lock_table.h's table: {rank} names {cls}, which is no class")

# The map names every folder of core/.
for d in sorted(p for p in (src / "core").iterdir() if p.is_dir()):
    if not re.search(rf"^  {re.escape(d.name)}/ ", design, re.M):
        bad.append(f"docs/DESIGN.md: the folder core/{d.name}/ is not in the map")

for b in bad:
    print("docs:", b)
print(f"{len(ranks)} ranks, {len(bad)} differences")
sys.exit(1 if bad else 0)
