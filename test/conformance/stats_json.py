#!/usr/bin/env python3
"""test/conformance/stats_json.py PROG — the JSON statistics against the table.

Runs PROG (test/conformance/stats_json.c) with USLAB_STATS=json: it writes the table,
the JSON document and uslab_stats_get's numbers at one moment; this checks that the
document parses, has the documented top-level fields, gives every class row of the
table with the same 17 numbers, the object cache with its name unescaped exactly,
the totals uslab_stats_get gave, and the known allocations; and that the report at
exit (USLAB_STATS=json, on stderr) is one JSON document of the same schema."""
import json
import os
import re
import subprocess
import sys
import tempfile

failures = 0
checks = 0


def check(what, ok):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
        print("FAIL:", what)


TOP = ["schema", "version", "pid", "mode", "topology", "classes", "caches", "bytes",
       "shards", "huge_objects", "thp", "deferred", "background", "refused_syscalls", "purge_refused_bytes",
       "memory_limit", "foreign_frees_forwarded", "prof", "guarded"]
CLASS_FIELDS = ["class", "size", "slabs", "objects", "active", "cpu", "depot", "thread",
                "free", "hits", "refills", "drains", "depot_hits", "slab_out", "slab_in",
                "deferred", "remote"]

with tempfile.TemporaryDirectory() as d:
    paths = [os.path.join(d, n) for n in ("table", "json", "numbers")]
    env = dict(os.environ, USLAB_STATS="json")
    run = subprocess.run([sys.argv[1]] + paths, env=env, capture_output=True, text=True)
    print(run.stdout, end="")
    check("the program passes (exit %d)" % run.returncode, run.returncode == 0)
    table = open(paths[0]).read()
    doc = json.load(open(paths[1]))
    numbers = dict(line.split(" ", 1) for line in open(paths[2]).read().splitlines())

    check("top-level fields in the documented order: %s" % list(doc), list(doc) == TOP)
    refused = doc.get("refused_syscalls")
    check("refused_syscalls maps names to EPERM or ENOSYS: %s" % refused,
          isinstance(refused, dict) and all(v in ("EPERM", "ENOSYS") for v in refused.values()))
    check("schema 1", doc["schema"] == 1)
    check("version is uslab_version()", doc["version"] == numbers["version"])
    rows = {}
    for line in table.splitlines():
        if re.match(r"^\s+\d+\s+\d+(\s+\d+){15}\s*$", line):
            v = [int(x) for x in line.split()]
            rows[v[0]] = v
    check("the table has class rows", len(rows) > 0)
    json_rows = {c["class"]: [c[f] for f in CLASS_FIELDS] for c in doc["classes"]}
    check("the same classes: table %s, JSON %s" % (sorted(rows), sorted(json_rows)),
          sorted(rows) == sorted(json_rows))
    for c, v in rows.items():
        check("class %d: table %s, JSON %s" % (c, v, json_rows.get(c)), json_rows.get(c) == v)
    c48 = [c for c in doc["classes"] if c["size"] >= 48 and c["active"] >= 1000]
    check("1000 live objects of 48 bytes in one class", len(c48) >= 1)
    caches = [c for c in doc["caches"] if c["name"] == numbers["cache_name"].rstrip("\n")]
    check("the cache's name comes back exactly", len(caches) == 1)
    if caches:
        check("the cache: 10 active of 200 bytes",
              caches[0]["active"] == 10 and caches[0]["size"] >= 200)
    b = doc["bytes"]
    for k in ("allocated", "active", "resident", "mapped", "metadata", "returned"):
        check("bytes.%s %d = uslab_stats_get's %s" % (k, b[k], numbers[k]), b[k] == int(numbers[k]))
    check("bytes.cached_* add up to uslab_stats_get's cached",
          b["cached_cpu"] + b["cached_depot"] + b["cached_thread"] == int(numbers["cached"]))
    check("one huge object of 8 MiB", doc["huge_objects"] == 1 and b["huge_allocated"] >= 8 << 20)
    check("10 large objects of 100 KB", b["large_allocated"] >= 10 * 100000)
    shards = doc["shards"]
    for k, total in (("large", "large_allocated"), ("free", "free"), ("dirty", "dirty"),
                     ("returned", "returned")):
        check("the shards' %s add up to bytes.%s" % (k, total),
              sum(s[k] for s in shards) == b[total])
    check("each shard maps whole 4 MiB segments",
          shards and all(s["mapped"] == s["segments"] << 22 for s in shards))
    check("bytes.pending_return counts the depots and the huge blocks kept",
          b["pending_return"] >= b["cached_depot"] + b["huge_kept"])
    check("guarded sampling off (the program's setting)", doc["guarded"]["sample_bytes"] == 0)
    check("no profiler: prof is null", doc["prof"] is None)
    check("the pid is the program's", isinstance(doc["pid"], int) and doc["pid"] > 0)
    try:
        at_exit = json.loads(run.stderr)
        check("the report at exit has the schema", at_exit.get("schema") == 1)
        check("the report at exit: the same pid", at_exit.get("pid") == doc["pid"])
        check("the report at exit: the 48-byte objects freed",
              all(c["active"] == 0 for c in at_exit["classes"] if c["size"] == 48))
    except ValueError as e:
        check("the report at exit is one JSON document (%s): %r" % (e, run.stderr[:300]), False)

print("stats_json.py: %d checks, %d failed" % (checks, failures))
sys.exit(1 if failures else 0)
