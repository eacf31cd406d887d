#!/usr/bin/env python3
"""test/vm/test_list.py BUILD — meson's test list of BUILD for the guests' runner
(guest.sh's run_listed), one test a line: suite, name, environment, command, timeout,
tab-separated; the environment's and the command's items joined by the unit separator.
A copy of a build tree still names the tree meson configured: those paths are made the
copy's, so a guest runs what it was given while the original is rebuilt. A cross build
lists its commands without meson's exe_wrapper: the guest runs them natively."""
import json
import subprocess
import sys

build = sys.argv[1]
tests = json.loads(subprocess.run(["meson", "introspect", build, "--tests"], check=True,
                                  stdout=subprocess.PIPE, text=True).stdout)
made = json.load(open(build + "/meson-info/meson-info.json"))["directories"]["build"]


def here(s):
    return build if s == made else s.replace(made + "/", build + "/")


for t in tests:
    suite = t["suite"][0].split(":")[-1]
    env = "\x1f".join(f"{k}={here(v)}" for k, v in t["env"].items())
    print("\t".join([suite, t["name"], env, "\x1f".join(map(here, t["cmd"])), str(t["timeout"])]))
