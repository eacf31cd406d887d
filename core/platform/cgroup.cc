// core/platform/cgroup.cc — the control group's memory limit; see cgroup.h.
#include "core/platform/cgroup.h"

#include <cstring>

#include "core/platform/os.h"

namespace uslab::os {

namespace {

constexpr size_t kPath = 256;

// Copies [s, s + n) into out (cap bytes, NUL-terminated); false when it does not fit.
bool copy(char* out, size_t cap, const char* s, size_t n) {
  if (n >= cap) return false;
  memcpy(out, s, n);
  out[n] = 0;
  return true;
}

// The process's cgroup paths: of the v2 hierarchy ("0::/path") and of the v1
// memory controller ("N:...memory...:/path").
struct ProcCgroup {
  char v2[kPath], v1[kPath];
  bool has_v2, has_v1;
};

bool parse_proc_cgroup_line(const char* line, size_t len, void* arg) {
  auto* pc = static_cast<ProcCgroup*>(arg);
  const char* c1 = static_cast<const char*>(memchr(line, ':', len));
  if (!c1) return true;
  const char* c2 = static_cast<const char*>(memchr(c1 + 1, ':', len - (c1 + 1 - line)));
  if (!c2) return true;
  const char* ctl = c1 + 1;
  size_t ctl_len = c2 - ctl;
  const char* path = c2 + 1;
  size_t path_len = len - (path - line);
  if (c1 - line == 1 && line[0] == '0' && ctl_len == 0) {
    pc->has_v2 = copy(pc->v2, kPath, path, path_len);
    return true;
  }
  // A comma-separated list of controllers: "memory" among them.
  for (const char* p = ctl; p < ctl + ctl_len;) {
    const char* end = static_cast<const char*>(memchr(p, ',', ctl + ctl_len - p));
    if (!end) end = ctl + ctl_len;
    if (end - p == 6 && memcmp(p, "memory", 6) == 0)
      pc->has_v1 = copy(pc->v1, kPath, path, path_len);
    p = end + 1;
  }
  return true;
}

// A mount of the hierarchy: its root within the hierarchy and its mount point.
struct Mount {
  char root[kPath], point[kPath];
  bool found;
  bool v2;  // looking for cgroup2 (else cgroup with the memory option)
};

// The n-th space-separated field of a line (0-based), or nullptr.
const char* field(const char* line, size_t len, int n, size_t* flen) {
  const char* p = line;
  const char* end = line + len;
  for (int i = 0; i < n && p < end; i++) {
    p = static_cast<const char*>(memchr(p, ' ', end - p));
    if (!p) return nullptr;
    p++;
  }
  const char* e = static_cast<const char*>(memchr(p, ' ', end - p));
  *flen = (e ? e : end) - p;
  return p;
}

bool parse_mount_line(const char* line, size_t len, void* arg) {
  auto* m = static_cast<Mount*>(arg);
  // "id parent maj:min root point options [optional...] - fstype source superopts"
  const char* sep = nullptr;
  for (const char* p = line; p + 3 <= line + len; p++)
    if (p[0] == ' ' && p[1] == '-' && p[2] == ' ') {
      sep = p + 3;
      break;
    }
  if (!sep) return true;
  size_t rest = len - (sep - line), flen = 0, olen = 0, rlen = 0, plen = 0;
  const char* fstype = field(sep, rest, 0, &flen);
  const char* super = field(sep, rest, 2, &olen);
  if (!fstype) return true;
  bool match;
  if (m->v2) {
    match = flen == 7 && memcmp(fstype, "cgroup2", 7) == 0;
  } else {
    match = flen == 6 && memcmp(fstype, "cgroup", 6) == 0 && super;
    bool memory = false;
    for (const char* p = super; match && p < super + olen;) {
      const char* end = static_cast<const char*>(memchr(p, ',', super + olen - p));
      if (!end) end = super + olen;
      memory |= end - p == 6 && memcmp(p, "memory", 6) == 0;
      p = end + 1;
    }
    match = match && memory;
  }
  if (!match) return true;
  const char* root = field(line, len, 3, &rlen);
  const char* point = field(line, len, 4, &plen);
  if (!root || !point) return true;
  m->found = copy(m->root, kPath, root, rlen) && copy(m->point, kPath, point, plen);
  return !m->found;  // the first match
}

// A limit file's value: a number of bytes, 0 for none ("max", or v1's page-rounded
// LONG_MAX and anything that large), UINT64_MAX when unreadable.
uint64_t read_limit(const char* path) {
  char buf[64];
  long n = read_file(path, buf, sizeof buf - 1);
  if (n <= 0) return UINT64_MAX;
  buf[n] = 0;
  if (memcmp(buf, "max", 3) == 0) return 0;
  uint64_t v = 0;
  int digits = 0;
  for (const char* p = buf; *p >= '0' && *p <= '9' && digits < 20; p++, digits++)
    v = v * 10 + (uint64_t)(*p - '0');
  if (digits == 0) return UINT64_MAX;
  return v >= (uint64_t{1} << 62) ? 0 : v;
}

}  // namespace

bool cgroup_memory_limit(const CgroupFiles& files, CgroupLimit* out) {
  *out = CgroupLimit{};
  ProcCgroup pc{};
  if (!for_each_line(files.proc_cgroup, parse_proc_cgroup_line, &pc)) return false;
  // The v1 memory controller where it is mounted (a hybrid layout also has a v2
  // hierarchy, without the memory controller); else v2.
  Mount m{};
  int version = 0;
  const char* cg = nullptr;
  if (pc.has_v1) {
    m.v2 = false;
    for_each_line(files.mountinfo, parse_mount_line, &m);
    if (m.found) version = 1, cg = pc.v1;
  }
  if (!version && pc.has_v2) {
    m = Mount{};
    m.v2 = true;
    for_each_line(files.mountinfo, parse_mount_line, &m);
    if (m.found) version = 2, cg = pc.v2;
  }
  if (!version) return false;
  // The cgroup's path below the mount: its path less the mount's root (equal under a
  // cgroup namespace, where both are "/").
  size_t root_len = strlen(m.root);
  if (root_len == 1) root_len = 0;  // "/"
  const char* rel = strncmp(cg, m.root, root_len) == 0 ? cg + root_len : cg;
  char dir[2 * kPath + 64];
  size_t base = 0;
  if (!copy(dir, sizeof dir, files.prefix, strlen(files.prefix))) return false;
  base = strlen(dir);
  size_t point_len = strlen(m.point), rel_len = strlen(rel);
  if (base + point_len + rel_len + 32 >= sizeof dir) return false;
  memcpy(dir + base, m.point, point_len);
  memcpy(dir + base + point_len, rel, rel_len + 1);
  size_t top = base + point_len;  // the mount point: the last directory looked at
  size_t len = strlen(dir);
  while (len > top && dir[len - 1] == '/') dir[--len] = 0;
  out->version = version;
  const char* names[2] = {version == 2 ? "/memory.max" : "/memory.limit_in_bytes",
                          version == 2 ? "/memory.high" : nullptr};
  for (;;) {
    for (const char* name : names) {
      if (!name) continue;
      size_t nlen = strlen(name);
      memcpy(dir + len, name, nlen + 1);
      uint64_t v = read_limit(dir);
      if (v != 0 && v != UINT64_MAX && (out->bytes == 0 || v < out->bytes)) {
        out->bytes = v;
        copy(out->file, sizeof out->file, dir, strlen(dir));
      }
      dir[len] = 0;
    }
    if (len <= top) break;
    while (len > top && dir[len - 1] != '/') len--;  // up to the parent
    while (len > top && dir[len - 1] == '/') len--;
    dir[len] = 0;
  }
  return true;
}

}  // namespace uslab::os
