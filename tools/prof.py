#!/usr/bin/env python3
"""uslab prof: run a command with uslab's heap profiler and show where memory goes.

    uslab prof [--svg FILE] [--sample BYTES] [--dir DIR] [--top N] -- CMD...
    uslab prof --read FILE.pb [--totals] [--top N]
    uslab prof --pid PID [--top N]

Runs CMD with libuslab.so preloaded and USLAB_CONF=prof=true (its own USLAB_CONF
settings kept), then reads the profile the command's process wrote at exit and prints
the top allocation sites: live at exit (what leaked or stayed) and allocated in all,
in bytes and objects, by the function that called the allocator. The files stay in
DIR (default: a new uslab-prof.* directory in the working directory): read them with
`go tool pprof -top|-svg|-http=: CMD FILE.pb`, or draw the folded stacks with any
flame-graph tool. --svg writes a flame graph of the bytes allocated. --read prints
the tables of a profile already written (--totals: each sample type's total).
--pid asks a running process started with prof=true for a profile now (through its
live region, tools/live.py), and prints its tables.
"""
import argparse
import html
import os
import shutil
import subprocess
import sys
import tempfile


# --- profile.proto, as much of it as the tables need -----------------------------

def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, i


def fields(buf):
    """(field, wire type, value) of one message: ints, or bytes for wire type 2."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 1:
            v, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 5:
            v, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield field, wire, v


def packed(v, wire):
    if wire == 0:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = varint(v, i)
        out.append(x)
    return out


def read_profile(path):
    """Samples as (values, [function name or address per frame, innermost first])."""
    data = open(path, "rb").read()
    strings, samples, locations, functions, mappings = [], [], {}, {}, {}
    for f, w, v in fields(data):
        if f == 6:
            strings.append(v.decode("utf-8", "replace"))
        elif f == 2:
            locs, vals = [], []
            for sf, sw, sv in fields(v):
                if sf == 1:
                    locs += packed(sv, sw)
                elif sf == 2:
                    vals += packed(sv, sw)
            samples.append((vals, locs))
        elif f == 3:
            m = {}
            for mf, mw, mv in fields(v):
                m[mf] = mv
            mappings[m.get(1)] = (m.get(2, 0), m.get(4, 0), m.get(5, 0))
        elif f == 4:
            loc = {"fn": None}
            for lf, lw, lv in fields(v):
                if lf == 1:
                    loc["id"] = lv
                elif lf == 2:
                    loc["map"] = lv
                elif lf == 3:
                    loc["addr"] = lv
                elif lf == 4:
                    for nf, nw, nv in fields(lv):
                        if nf == 1:
                            loc["fn"] = nv
            locations[loc["id"]] = loc
        elif f == 5:
            fid = name = None
            for ff, fw, fv in fields(v):
                if ff == 1:
                    fid = fv
                elif ff == 2:
                    name = fv
            functions[fid] = name
    def frame(lid):
        loc = locations[lid]
        if loc["fn"] is not None and loc["fn"] in functions:
            return strings[functions[loc["fn"]]]
        if loc.get("map") in mappings:  # no symbol: object+offset, as pprof shows it
            start, offset, name = mappings[loc["map"]]
            return "%s+0x%x" % (os.path.basename(strings[name]) or "?", loc.get("addr", 0) - start + offset)
        return "0x%x" % loc.get("addr", 0)
    return [(vals, [frame(l) for l in locs]) for vals, locs in samples]


def demangle(names):
    names = sorted(set(n for n in names if n.startswith("_Z")))
    if not names or not shutil.which("c++filt"):
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return dict(zip(names, out.splitlines()))


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return ("%.0f %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0


def top_table(samples, names, value_index, count_index, title, limit):
    by_site = {}
    for vals, frames in samples:
        site = frames[0] if frames else "?"
        if "+0x" in site:  # unnamed (a stripped library): say which named code called it
            caller = next((f for f in frames[1:] if "+0x" not in f and not f.startswith("0x")), None)
            if caller:
                site += " (from " + caller + ")"
        b, o = by_site.get(site, (0, 0))
        by_site[site] = (b + vals[value_index], o + vals[count_index])
    total = sum(b for b, _ in by_site.values())
    rows = sorted(by_site.items(), key=lambda kv: -kv[1][0])[:limit]
    print("%s: %s in %d sites" % (title, human(total), sum(1 for b, _ in by_site.values() if b > 0)))
    if total <= 0:
        return
    print("  %12s %6s %12s  %s" % ("bytes", "%", "objects", "site"))
    for site, (b, o) in rows:
        if b <= 0:
            break
        print("  %12s %5.1f%% %12d  %s" % (human(b), 100.0 * b / total, o, names.get(site, site)))


# --- flame graph ------------------------------------------------------------------

def flame_svg(folded_path, out_path, names, title):
    root = {"n": 0, "kids": {}}
    for line in open(folded_path):
        stack, _, value = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        v = int(value)
        node = root
        node["n"] += v
        for frame in stack.split(";"):
            node = node["kids"].setdefault(frame, {"n": 0, "kids": {}})
            node["n"] += v
    width, row = 1200.0, 17
    rects = []

    def depth(node):
        return 1 + max((depth(k) for k in node["kids"].values()), default=0)

    levels = depth(root)
    height = levels * row + 40

    def place(node, name, x, level):
        w = width * node["n"] / root["n"] if root["n"] else 0
        if w < 0.3:
            return
        y = height - (level + 1) * row - 10
        label = names.get(name, name)
        hue = 30 + sum(map(ord, name)) % 30
        text = html.escape(label if len(label) * 7 < w else label[:max(0, int(w / 7) - 2)] + ".." if w > 21 else "")
        rects.append('<g><title>%s (%s, %.2f%%)</title><rect x="%.1f" y="%d" width="%.1f" height="%d" '
                     'fill="hsl(%d,85%%,60%%)" stroke="white" stroke-width="0.5"/>'
                     '<text x="%.1f" y="%d" font-size="11" font-family="monospace">%s</text></g>'
                     % (html.escape(label), human(node["n"]), 100.0 * node["n"] / root["n"], x, y, w,
                        row - 1, hue, x + 3, y + row - 5, text))
        cx = x
        for kid_name, kid in sorted(node["kids"].items(), key=lambda kv: -kv[1]["n"]):
            place(kid, kid_name, cx, level + 1)
            cx += width * kid["n"] / root["n"]

    place(root, "all", 0.0, 0)
    with open(out_path, "w") as f:
        f.write('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d">' % (width, height))
        f.write('<text x="10" y="20" font-size="14" font-family="sans-serif">%s</text>' % html.escape(title))
        f.write("".join(rects))
        f.write("</svg>\n")


def main():
    ap = argparse.ArgumentParser(prog="uslab prof", description=__doc__.split("\n")[0])
    ap.add_argument("--lib")
    ap.add_argument("--read", metavar="FILE", help="print the tables of this profile")
    ap.add_argument("--totals", action="store_true", help="with --read: each sample type's total")
    ap.add_argument("--svg", help="write a flame graph of the bytes allocated to this file")
    ap.add_argument("--sample", help="mean bytes between samples (prof_sample; default 512k)")
    ap.add_argument("--dir", help="where the profile files go (default: a new uslab-prof.* here)")
    ap.add_argument("--pid", type=int, help="a profile of this running process, now")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if a.pid:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import live
        try:
            a.read = live.request_profile(a.pid)
        except live.LiveError as e:
            sys.exit("uslab prof: %s" % e)
        print("profile of process %d: %s" % (a.pid, a.read))
    if a.read:
        samples = read_profile(a.read)
        if a.totals:
            for i, name in enumerate(("alloc_objects", "alloc_space", "inuse_objects", "inuse_space")):
                print(name, sum(vals[i] for vals, _ in samples))
            return
        names = demangle(f for _, frames in samples for f in frames)
        top_table(samples, names, 3, 2, "live", a.top)
        print()
        top_table(samples, names, 1, 0, "allocated in all", a.top)
        return
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not a.lib:
        ap.error("--lib is needed to run a command")
    if not cmd:
        ap.error("no command: uslab prof [--svg FILE] -- CMD...")
    out_dir = a.dir or tempfile.mkdtemp(prefix="uslab-prof.", dir=os.getcwd())
    os.makedirs(out_dir, exist_ok=True)
    prefix = os.path.join(os.path.abspath(out_dir), "prof")
    conf = "prof=true,prof_final=" + prefix + (",prof_sample=" + a.sample if a.sample else "")
    env = dict(os.environ)
    env["USLAB_CONF"] = (env["USLAB_CONF"] + "," if env.get("USLAB_CONF") else "") + conf
    env["LD_PRELOAD"] = a.lib + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    try:
        proc = subprocess.Popen(cmd, env=env)
    except OSError as e:
        sys.exit("uslab prof: cannot run %s: %s" % (cmd[0], e))
    rc = proc.wait()
    # The command's own process first (its children, if any, write theirs too).
    written = sorted(os.listdir(out_dir))
    mine = [f for f in written if f.startswith("prof.%d." % proc.pid)]
    finals = [f for f in mine or written if f.endswith(".final.pb")]
    if not finals:
        # The profile is written at exit(): not by a program that ends with _exit
        # (dash does), is static, or has an allocator of its own.
        sys.stderr.write("uslab prof: %s wrote no profile (it ended with _exit, or is static, "
                         "or has its own allocator)\n" % cmd[0])
        sys.exit(rc or 1)
    final = os.path.join(out_dir, finals[0])
    peaks = [f for f in mine or written if f.endswith(".peak.pb")]
    peak = os.path.join(out_dir, peaks[0]) if peaks else "(none)"
    samples = read_profile(final)
    names = demangle(f for _, frames in samples for f in frames)
    print()
    top_table(samples, names, 3, 2, "live at exit", a.top)
    print()
    top_table(samples, names, 1, 0, "allocated in all", a.top)
    print("\nprofiles (pprof's profile.proto; folded stacks beside them):\n  %s\n  %s (the live heap at its peak)"
          % (final, peak))
    print("read them with: go tool pprof -top -sample_index=alloc_space %s %s" % (cmd[0], final))
    if a.svg:
        flame_svg(final + ".alloc.folded", a.svg, names, "bytes allocated: " + " ".join(cmd)[:120])
        print("flame graph: %s" % a.svg)
    sys.exit(rc)


if __name__ == "__main__":
    main()
