#!/usr/bin/env python3
"""test/sandbox/profile.py PROFILE.json [--docker] — a container runtime's seccomp
profile (the OCI format Docker, podman and containerd read) as arguments for
test/sandbox/deny, one per line.

The profile's rules are evaluated for this machine's architecture and kernel and for
the capabilities a container gets by default (Docker's and podman's set, without
CAP_SYS_ADMIN, CAP_SYS_NICE or CAP_SYS_PTRACE), as the runtime does when it builds
the filter. Rules that also test a call's arguments (clone's namespace flags,
personality, socket's family) are taken as their call allowed, or not refused: the
filter is then a little looser than the runtime's, never stricter.

--docker: the rules where Docker's default profile (moby's profiles/seccomp) differs
from the containers' one Debian ships (containers-common, podman's and buildah's):
every call the profile does not allow fails with EPERM, not ENOSYS; get_mempolicy,
mbind, set_mempolicy and set_mempolicy_home_node need CAP_SYS_NICE; clone3 fails with
ENOSYS (glibc then uses clone).
"""
import json
import os
import platform
import sys

DEFAULT_CAPS = {"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
                "CAP_NET_BIND_SERVICE", "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP",
                "CAP_SETUID", "CAP_SYS_CHROOT", "CAP_NET_RAW", "CAP_MKNOD",
                "CAP_AUDIT_WRITE"}
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
NUMA = ["get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"]


def kernel_at_least(version):
    have = [int(x) for x in platform.release().split("-")[0].split(".")[:2]]
    want = [int(x) for x in version.split(".")[:2]]
    return have >= want


def applies(rule):
    inc, exc = rule.get("includes") or {}, rule.get("excludes") or {}
    if inc.get("arches") and ARCH not in inc["arches"]:
        return False
    if inc.get("caps") and not set(inc["caps"]) <= DEFAULT_CAPS:
        return False
    if inc.get("minKernel") and not kernel_at_least(inc["minKernel"]):
        return False
    if exc.get("arches") and ARCH in exc["arches"]:
        return False
    if exc.get("caps") and set(exc["caps"]) & DEFAULT_CAPS:
        return False
    return True


def main():
    profile = json.load(open(sys.argv[1]))
    docker = "--docker" in sys.argv[2:]
    default = 1 if docker else profile.get("defaultErrnoRet", 1)
    if profile.get("defaultAction") != "SCMP_ACT_ERRNO":
        sys.exit("profile.py: default action %s not handled" % profile.get("defaultAction"))
    allowed, refused = set(), {}  # refused: errno -> names
    for rule in profile["syscalls"]:
        if not applies(rule):
            continue
        if rule["action"] == "SCMP_ACT_ALLOW":
            allowed.update(rule["names"])
        elif rule["action"] == "SCMP_ACT_ERRNO" and not rule.get("args"):
            refused.setdefault(rule.get("errnoRet", default), set()).update(rule["names"])
    if docker:
        allowed.difference_update(NUMA)
        allowed.discard("clone3")
        refused.setdefault(38, set()).add("clone3")
    args = []
    for err, names in sorted(refused.items()):
        names -= allowed
        if names and err != default:  # the default answers those already
            args += ["-x", str(err), ",".join(sorted(names))]
    args += ["-e", {1: "EPERM", 38: "ENOSYS"}[default], "-a", ",".join(sorted(allowed))]
    print("\n".join(args))


if __name__ == "__main__":
    main()
