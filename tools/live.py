#!/usr/bin/env python3
"""uslab's statistics and heap profile from a running process (docs/LIVE.md).

    uslab stats --pid PID [--json | --prometheus]
    uslab top PID [--sort COLUMN] [--interval SECONDS] [--batch [--frames N]]
    uslab prof --pid PID (tools/prof.py, through request_profile below)

A process that runs uslab (preloaded, linked, or static) keeps a region called
"uslab-live" (see /proc/PID/maps). This reader asks it for fresh figures by adding
one to a request counter there, waits for the process's background thread to write
them (within one decay tick), and reads them; it writes and reads the region through
/proc/PID/mem, which needs what a debugger needs: the same user (and, where Yama's
kernel.yama.ptrace_scope is 1 or more, root or CAP_SYS_PTRACE).
"""
import argparse
import json
import os
import re
import struct
import sys
import time

NAME = "/memfd:uslab-live"
MAGIC = b"uslabLV1"
HEADER_AT = 64  # the requests are at 0 (stats) and 4 (profile)
DOC_AT = 4096
# magic, pid, flags, seq, written_ms, stats_served, profile_served, tick_ms,
# json_bytes, table_bytes, profile_error, version[32], profile_path[512]
HEADER = struct.Struct("<8sIIQQIIIIIi32s512s")
FLAG_ASLEEP, FLAG_TRUNCATED = 1, 2


class LiveError(Exception):
    pass


def region_address(pid):
    """Start of the process's live region; LiveError saying why there is none."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read()
    except FileNotFoundError:
        raise LiveError("no process %d" % pid)
    except PermissionError:
        raise LiveError("cannot read /proc/%d/maps (another user's process: run as that "
                        "user or root)" % pid)
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith(NAME):
            return int(parts[0].split("-")[0], 16)
    why = ("uslab makes it when its background thread starts: at the first allocator call "
           "30 ms after the process started, or once the heap maps 8 MiB or 4 MiB wait to be "
           "returned; at once with USLAB_CONF=background_thread=true; never with "
           "background_thread=false or live_stats=false (or before uslab 0.1.0's live "
           "statistics)")
    conf = started_with(pid)
    for key in ("live_stats", "background_thread"):
        m = re.search(r"(?:^|,)%s=(false|0|no|off)\b" % key, conf)
        if m:
            raise LiveError("process %d was started with USLAB_CONF=%s: it has no live "
                            "statistics (%s)" % (pid, conf, why))
    if "libuslab" in maps:
        raise LiveError("process %d runs uslab but has no live region yet: %s" % (pid, why))
    raise LiveError("process %d has no uslab live region: it does not run uslab (no libuslab "
                    "in its maps: start it with LD_PRELOAD=libuslab.so), or is a static binary "
                    "with none yet (%s)" % (pid, why))


def started_with(pid):
    """The USLAB_CONF the process was started with ('' if none or unreadable)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            for var in f.read().split(b"\0"):
                if var.startswith(b"USLAB_CONF="):
                    return var[len(b"USLAB_CONF="):].decode("utf-8", "replace")
    except OSError:
        pass
    return ""


class Process:
    """The live region of one process, read and written through /proc/PID/mem."""

    def __init__(self, pid):
        self.pid = pid
        self.base = region_address(pid)
        try:
            self.mem = open("/proc/%d/mem" % pid, "r+b", buffering=0)
        except PermissionError:
            raise LiveError("cannot open /proc/%d/mem: reading another process's memory needs "
                            "what a debugger needs (the same user, and where "
                            "kernel.yama.ptrace_scope is 1 or more, root or CAP_SYS_PTRACE)" % pid)
        except FileNotFoundError:
            raise LiveError("no process %d" % pid)

    def read(self, offset, n):
        try:
            self.mem.seek(self.base + offset)
            return self.mem.read(n)
        except OSError as e:
            raise LiveError("process %d: cannot read its memory (%s)" % (self.pid, e))

    def word(self, offset):
        return struct.unpack("<I", self.read(offset, 4))[0]

    def ask(self, offset):
        """Adds one to the request counter at offset; returns the new value."""
        value = (self.word(offset) + 1) & 0xFFFFFFFF
        try:
            self.mem.seek(self.base + offset)
            self.mem.write(struct.pack("<I", value))
        except OSError as e:
            raise LiveError("process %d: cannot write its request word (%s)" % (self.pid, e))
        return value

    def header(self):
        h = HEADER.unpack(self.read(HEADER_AT, HEADER.size))
        keys = ("magic pid flags seq written_ms stats_served profile_served tick_ms "
                "json_bytes table_bytes profile_error version profile_path").split()
        h = dict(zip(keys, h))
        for k in ("version", "profile_path"):
            h[k] = h[k].split(b"\0")[0].decode("utf-8", "replace")
        return h

    def check(self, h):
        if h["seq"] and h["magic"] != MAGIC:
            raise LiveError("process %d writes another layout of the live region (%r; this "
                            "reader knows %r): use the uslab command of the version it runs"
                            % (self.pid, h["magic"], MAGIC))

    def snapshot(self):
        """The header, JSON text and table of the last snapshot (seqlock read), or None."""
        for _ in range(200):
            h = self.header()
            self.check(h)
            if h["seq"] == 0:
                return None
            if h["seq"] % 2:
                time.sleep(0.002)
                continue
            docs = self.read(DOC_AT, h["json_bytes"] + h["table_bytes"])
            if self.header()["seq"] != h["seq"]:
                continue
            h["json"] = docs[:h["json_bytes"]].decode("utf-8", "replace")
            h["table"] = docs[h["json_bytes"]:].decode("utf-8", "replace")
            return h
        raise LiveError("process %d: the snapshot kept changing while read" % self.pid)

    def wait_for(self, key, value, timeout):
        """Waits until header[key] reaches value; True if it did."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            h = self.header()
            self.check(h)
            if h[key] == value and h["seq"] % 2 == 0:
                return True
            time.sleep(0.01)
        return False

    def timeout(self):
        """How long a request may take: a tick and some; two and more while the thread
        may be between ticks, but one when its last snapshot was written as it went to
        sleep (asleep, it cannot answer; woken since, it answers on its first tick)."""
        h = self.header()
        tick = (h["tick_ms"] or 625) / 1000.0
        if h["seq"] and h["flags"] & FLAG_ASLEEP:
            return tick + 0.3
        return max(2.0, 2 * tick + 0.5)


def tool_version():
    """This reader's uslab version (the uslab command's, or include/uslab.h beside it)."""
    if os.environ.get("USLAB_TOOL_VERSION"):
        return os.environ["USLAB_TOOL_VERSION"]
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "uslab.h")
    try:
        with open(header) as f:
            m = re.search(r'#define USLAB_VERSION "([^"]*)"', f.read())
            return m.group(1) if m else None
    except OSError:
        return None


def thp_process_bytes(pid):
    """AnonHugePages of /proc/PID/smaps_rollup in bytes (the writer leaves it to us)."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def fresh(proc, wait=True):
    """Asks for new figures and returns the snapshot with 'stats' (parsed JSON), 'age'
    (seconds) and 'note' (why the figures are not new, or '')."""
    note = ""
    if wait:
        want = proc.ask(0)
        if not proc.wait_for("stats_served", want, proc.timeout()):
            h = proc.header()
            if not has_background_thread(proc.pid):
                note = ("no new figures: process %d has no uslab background thread, which writes "
                        "them (it starts one at its first allocator call 30 ms after its start, "
                        "or once its heap passes 8 MiB or it has memory to return; never with "
                        "background_thread=false); they come at its next "
                        "allocator call, or start it with USLAB_CONF=background_thread=true"
                        % proc.pid)
            elif h["seq"] and h["flags"] & FLAG_ASLEEP:
                note = ("the process is idle: its background thread went to sleep with nothing "
                        "to do, and the figures it wrote then still hold (no allocator call "
                        "since)")
            else:
                note = "no new figures within %.1f s" % proc.timeout()
    snap = proc.snapshot()
    if snap is None:
        raise LiveError("process %d has written no statistics yet: %s" % (proc.pid, note))
    if snap["pid"] != proc.pid:
        raise LiveError("process %d has written no statistics of its own yet (the region "
                        "holds its parent's, from before a fork): %s" % (proc.pid, note))
    try:
        snap["stats"] = json.loads(snap["json"])
    except ValueError as e:
        cut = " (truncated: it outgrew the region)" if snap["flags"] & FLAG_TRUNCATED else ""
        raise LiveError("process %d: the JSON document does not parse%s: %s" % (proc.pid, cut, e))
    snap["stats"].setdefault("thp", {})["process_bytes"] = thp_process_bytes(proc.pid)
    snap["age"] = max(0.0, time.monotonic() * 1000
                      - snap["written_ms"]) / 1000.0
    mine = tool_version()
    if mine and snap["version"] != mine:
        note = ((note + "; ") if note else "") + (
            "process %d runs uslab %s, this reader is uslab %s (the same region layout; "
            "fields it does not know are left out)" % (proc.pid, snap["version"], mine))
    snap["note"] = note
    return snap


def has_background_thread(pid):
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() == "uslab-bg":
                    return True
    except OSError:
        pass
    return False


def request_profile(pid, timeout=None):
    """Asks a process started with prof=true for a heap profile; returns its path."""
    proc = Process(pid)
    want = proc.ask(4)
    if not proc.wait_for("profile_served", want, timeout or proc.timeout() + 3):
        why = ("its background thread, which writes it, is asleep: it will at the process's "
               "next allocator call" if has_background_thread(pid) else
               "it has no uslab background thread (started at the first allocator call 30 ms "
               "after the start, or once the heap passes 8 MiB or has memory to return; never "
               "with background_thread=false): start it with "
               "USLAB_CONF=prof=true,background_thread=true to ask at any time")
        raise LiveError("process %d wrote no profile yet: %s" % (pid, why))
    h = proc.header()
    if h["profile_error"]:
        why = ("it was started without prof=true (USLAB_CONF=prof=true)"
               if h["profile_error"] == 22 else os.strerror(h["profile_error"]))
        raise LiveError("process %d wrote no profile: %s" % (pid, why))
    path = h["profile_path"]
    if not os.path.isabs(path):  # the process's working directory, named as it is
        try:
            path = os.path.join(os.readlink("/proc/%d/cwd" % pid), path)
        except OSError:
            path = os.path.join("/proc/%d/cwd" % pid, path)
    return path


# --- Prometheus text exposition -----------------------------------------------------

def label_value(v):
    return str(v).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def prometheus(snap):
    s = snap["stats"]
    out = []
    declared = set()

    def metric(name, mtype, help_text, value, **labels):
        if value is None:
            return
        if name not in declared:
            declared.add(name)
            out.append("# HELP %s %s" % (name, help_text))
            out.append("# TYPE %s %s" % (name, mtype))
        lab = ",".join('%s="%s"' % (k, label_value(v)) for k, v in labels.items())
        out.append("%s%s %s" % (name, "{%s}" % lab if lab else "", value))

    metric("uslab_info", "gauge", "The library and its fast path.", 1, version=s["version"],
           fast_path=s["mode"]["fast_path"], pid=s["pid"])
    metric("uslab_snapshot_age_seconds", "gauge", "Age of these figures.", "%.3f" % snap["age"])
    for k, v in s["bytes"].items():
        if k == "returned":
            metric("uslab_returned_bytes_total", "counter",
                   "Bytes of free pages returned to the OS.", v)
        else:
            metric("uslab_bytes", "gauge", "Heap bytes by kind (docs/STATS.md bytes.*).", v,
                   kind=k)
    metric("uslab_huge_objects", "gauge", "Live huge objects.", s["huge_objects"])
    for c in s["classes"]:
        lab = dict(cls=c["class"], size=c["size"])
        metric("uslab_class_slabs", "gauge", "Slabs of a size class.", c["slabs"], **lab)
        metric("uslab_class_objects", "gauge", "Object slots in a class's slabs.", c["objects"],
               **lab)
        metric("uslab_class_active_objects", "gauge", "Live objects of a size class.",
               c["active"], **lab)
        for where in ("cpu", "depot", "thread", "free"):
            metric("uslab_class_free_objects", "gauge",
                   "Free objects of a class by where they wait.", c[where], where=where, **lab)
        for k in ("hits", "refills", "drains"):
            metric("uslab_class_%s_total" % k, "counter", "Cache %s of a size class." % k, c[k],
                   **lab)
    for c in s["caches"]:
        lab = dict(cache=c["name"], size=c["size"])
        metric("uslab_cache_objects", "gauge", "Object slots of an object cache.", c["objects"],
               **lab)
        metric("uslab_cache_active_objects", "gauge", "Live objects of an object cache.",
               c["active"], **lab)
    for sh in s.get("shards", []):
        for k in ("mapped", "large", "free", "dirty"):
            metric("uslab_shard_bytes", "gauge", "A shard's page heap bytes by kind.", sh[k],
                   shard=sh["shard"], node=sh["node"], kind=k)
    bg = s["background"]
    metric("uslab_background_running", "gauge", "1 while the background thread runs.",
           int(bg["state"] == "running"))
    metric("uslab_background_ticks_total", "counter", "Decay ticks the thread ran.", bg["ticks"])
    lim = s["memory_limit"]
    metric("uslab_memory_limit_bytes", "gauge", "The heap's memory limit (0: none).", lim["bytes"])
    metric("uslab_memory_limit_releases_total", "counter", "Releases the limit forced.",
           lim["releases"])
    d = s["deferred"]
    metric("uslab_deferred_pending_objects", "gauge", "Deferred frees waiting.", d["pending"])
    metric("uslab_thp_process_bytes", "gauge", "The process's bytes in huge pages.",
           s["thp"].get("process_bytes"))
    if s.get("prof"):
        metric("uslab_prof_live_bytes", "gauge", "Live heap estimated by the profiler.",
               s["prof"]["live_bytes"])
    return "\n".join(out) + "\n"


# --- top ------------------------------------------------------------------------------

# Column: (title, width, value of a class row).
COLUMNS = [
    ("class", 5, lambda c: c["class"]),
    ("size", 7, lambda c: c["size"]),
    ("slabs", 7, lambda c: c["slabs"]),
    ("objects", 10, lambda c: c["objects"]),
    ("active", 10, lambda c: c["active"]),
    ("use%", 5, lambda c: 100 * c["active"] // c["objects"] if c["objects"] else 0),
    ("cached", 9, lambda c: c["cpu"] + c["depot"] + c["thread"]),
    ("bytes", 11, lambda c: c["active"] * c["size"]),
    ("hits", 12, lambda c: c["hits"]),
    ("refills", 9, lambda c: c["refills"]),
]
SORT_KEYS = {name: i for i, (name, _, _) in enumerate(COLUMNS)}


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0


def frame(pid, snap, sort, rows):
    """The lines of one screen of `uslab top`."""
    s = snap["stats"]
    b = s["bytes"]
    bg = s["background"]
    lim = s["memory_limit"]
    comm = ""
    try:
        with open("/proc/%d/comm" % pid) as f:
            comm = f.read().strip()
    except OSError:
        pass
    lines = [
        "uslab top - pid %d (%s), uslab %s, %s; figures %.1f s old; sorted by %s" % (
            pid, comm, s["version"], s["mode"]["fast_path"], snap["age"], COLUMNS[sort][0]),
        "heap: %s allocated, %s active, %s resident, %s cached, %s free (%s dirty), "
        "%s pending return" % (
            human(b["allocated"]), human(b["active"]), human(b["resident"]),
            human(b["cached_cpu"] + b["cached_depot"] + b["cached_thread"]), human(b["free"]),
            human(b["dirty"]), human(b.get("pending_return", 0))),
        "limit: %s; background thread: %s, %d ticks, %d sleeps; returned to the OS: %s" % (
            human(lim["bytes"]) if lim["bytes"] else "none", bg["state"], bg["ticks"],
            bg["sleeps"], human(b["returned"])),
    ]
    shards = ", ".join("%d (node %d) %s mapped, %s large, %s free" % (
        sh["shard"], sh["node"], human(sh["mapped"]), human(sh["large"]), human(sh["free"]))
        for sh in s.get("shards", [])[:6])
    lines.append("shards: " + (shards or "none yet"))
    if snap["note"]:
        lines.append("note: " + snap["note"])
    lines.append("")
    lines.append(" ".join(("%*s" % (w, t.upper())) for t, w, _ in COLUMNS))
    key = COLUMNS[sort][2]
    classes = sorted(s["classes"], key=lambda c: (key(c), -c["class"]), reverse=sort != 0)
    for c in classes[:rows]:
        lines.append(" ".join("%*d" % (w, f(c)) for _, w, f in COLUMNS))
    return lines


def top_batch(pid, sort, interval, frames):
    proc = Process(pid)
    for i in range(frames):
        if i:
            time.sleep(interval)
        print("\n".join(frame(pid, fresh(proc), sort, 1 << 30)))
        print()
        sys.stdout.flush()


def top_screen(pid, sort, interval):
    import curses

    proc = Process(pid)

    def run(scr):
        nonlocal sort
        curses.curs_set(0)
        scr.timeout(100)
        snap, due = None, 0.0
        while True:
            if time.monotonic() >= due:
                snap = fresh(proc)
                due = time.monotonic() + interval
            height, width = scr.getmaxyx()
            lines = frame(pid, snap, sort, max(0, height - 9))
            lines.append("")
            lines.append("keys: < > sort column, " + ", ".join(
                "%s %s" % (k, COLUMNS[i][0]) for k, i in KEYS.items()) + ", q quit")
            scr.erase()
            for y, line in enumerate(lines[:height]):
                scr.addnstr(y, 0, line, width - 1)
            scr.refresh()
            ch = scr.getch()
            if ch in (ord("q"), 27):
                return
            if ch == ord("<"):
                sort = (sort - 1) % len(COLUMNS)
            elif ch == ord(">"):
                sort = (sort + 1) % len(COLUMNS)
            elif ch >= 0 and chr(ch) in KEYS:
                sort = KEYS[chr(ch)]

    curses.wrapper(run)


KEYS = {"c": SORT_KEYS["class"], "s": SORT_KEYS["size"], "o": SORT_KEYS["objects"],
        "a": SORT_KEYS["active"], "b": SORT_KEYS["bytes"], "h": SORT_KEYS["hits"]}


def main():
    ap = argparse.ArgumentParser(prog="uslab live", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stats")
    st.add_argument("--pid", type=int, required=True)
    how = st.add_mutually_exclusive_group()
    how.add_argument("--json", action="store_true")
    how.add_argument("--prometheus", action="store_true")
    st.add_argument("--no-wait", action="store_true",
                    help="the last figures written, without asking for new ones")
    tp = sub.add_parser("top")
    tp.add_argument("pid", type=int)
    tp.add_argument("--sort", default="active", choices=[c[0] for c in COLUMNS])
    tp.add_argument("--interval", type=float, default=2.0)
    tp.add_argument("--batch", action="store_true", help="print frames instead of a screen")
    tp.add_argument("--frames", type=int, default=1, help="with --batch: how many")
    a = ap.parse_args()
    try:
        if a.cmd == "stats":
            snap = fresh(Process(a.pid), wait=not a.no_wait)
            if snap["note"]:
                sys.stderr.write("uslab: %s\n" % snap["note"])
            if a.json:
                json.dump(snap["stats"], sys.stdout, indent=1)
                print()
            elif a.prometheus:
                sys.stdout.write(prometheus(snap))
            else:
                sys.stdout.write(snap["table"])
        elif a.batch:
            top_batch(a.pid, SORT_KEYS[a.sort], a.interval, a.frames)
        else:
            top_screen(a.pid, SORT_KEYS[a.sort], a.interval)
    except LiveError as e:
        sys.exit("uslab: %s" % e)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
