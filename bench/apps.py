"""bench/apps.py — real programs from Debian's packages with generated workloads, for
`uslab bench apps` (bench/programs.py runs them under each allocator, through
bench/launch.py's run_once: the same launcher, input replay and malloc-binding check as
`uslab ab`).

Each App writes its inputs into a work directory and names the command to run there.
Its standard output is compared with the run under glibc (or, for a program that
links its own allocator, under the first allocator), so a run that computed
something else is caught; where the output carries timings (db_bench) or the program
is a server driven by a client (redis), a check of the program's own says it worked.

To add a program: an App with the Debian package that provides it, a prepare()
that writes its input, and the command. `uslab ab -- CMD` measures one program the
same way, alone.
"""
import os
import subprocess
import time

from common import preload_env

SQLITE_SCRIPT = """
CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b TEXT, c REAL);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 300000)
INSERT INTO t SELECT x, (x * 7919) % 100003,
  substr('abcdefghijklmnopqrstuvwxyz', x % 26 + 1, 8) || printf('%08d', (x * 31) % 300007),
  (x % 1000) / 7.0 FROM n;
CREATE INDEX ta ON t(a);
CREATE INDEX tb ON t(b);
CREATE TABLE u(id INTEGER PRIMARY KEY, tid INTEGER, v TEXT);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 100000)
INSERT INTO u SELECT x, (x * 31) % 300000 + 1, printf('%.*c', x % 50 + 10, 'v') FROM n;
SELECT count(*), sum(t.a), sum(length(u.v)) FROM t JOIN u ON u.tid = t.id;
SELECT a % 100 AS k, count(*), round(avg(c), 3) FROM t GROUP BY k ORDER BY k LIMIT 5;
UPDATE t SET b = b || printf('%.*c', 200 + id % 300, 'x') WHERE id % 3 = 0;
SELECT id, substr(b, 1, 20) FROM t ORDER BY b DESC LIMIT 3;
SELECT id FROM t ORDER BY c DESC, b LIMIT 5;
SELECT length(group_concat(b, ',')) FROM (SELECT b FROM t WHERE id % 7 = 0);
SELECT count(DISTINCT a), count(DISTINCT substr(b, 1, 3)) FROM t;
DELETE FROM t WHERE id % 2 = 0;
SELECT count(*), sum(length(b)) FROM t;
"""

PYTHON_SCRIPT = """
import collections, json, re
d = {f"key{i}": [i, str(i) * 3, {"x": i, "y": [i] * (i % 7)}] for i in range(120000)}
s = json.dumps(d)
e = json.loads(s)
words = re.findall(r"[a-z]+[0-9]", s[:3000000])
c = collections.Counter(words)
l = sorted(e.items(), key=lambda kv: (kv[1][0] % 1000, kv[0]))
strings = sorted(str(i) * (i % 40) for i in range(80000))
print(len(s), len(e), c.most_common(3), l[0][0], l[-1][0], len("".join(strings)))
"""

PERL_SCRIPT = r"""
my %h;
for my $i (1 .. 300000) { $h{"k$i"} = join(",", $i, $i * 2, "x" x ($i % 50)); }
my @k = sort { $h{$a} cmp $h{$b} or $a cmp $b } keys %h;
my $s = join("", map { substr($h{$_}, 0, 3) } @k[0 .. 49999]);
my $n = () = $s =~ /1/g;
my %w; $w{$_ % 997} .= "y" for 1 .. 200000;
print scalar(@k), " $n ", length(join(";", values %h)), " ", length(join("", values %w)), "\n";
"""

LUA_SCRIPT = """
local t = {}
for i = 1, 300000 do t[i] = {id = i, s = string.rep("a", i % 40) .. i} end
table.sort(t, function(a, b) return a.s < b.s end)
local parts = {}
for i = 1, #t, 3 do parts[#parts + 1] = t[i].s end
local s = table.concat(parts, ",")
local m, n = {}, 0
for w in s:gmatch("a+%d") do m[w] = (m[w] or 0) + 1 end
for _ in pairs(m) do n = n + 1 end
print(#s, n, t[1].s, t[#t].s)
"""

CXX_SOURCE = """
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>
template <int N> struct Node {
  std::map<std::string, std::vector<std::tuple<int, double, std::string>>> m;
  std::unordered_map<int, std::variant<int, std::string, std::vector<Node<N - 1>>>> u;
  std::function<int(const std::string&)> f;
  int visit() const {
    int s = 0;
    for (auto& [k, v] : u) s += std::visit([](auto& x) -> int {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, int>) return x; else return int(x.size());
    }, v);
    return s + int(m.size());
  }
};
template <> struct Node<0> { int visit() const { return 0; } };
#define USE(N) int use##N(const std::string& s) { Node<N> n; std::regex r("([a-z]+)" #N); \\
  std::smatch mm; std::regex_search(s, mm, r); n.f = [](const std::string& t) { return int(t.size()); }; \\
  std::vector<std::unique_ptr<Node<N>>> v; v.push_back(std::make_unique<Node<N>>()); \\
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a->visit() < b->visit(); }); \\
  return n.visit() + int(mm.size()) + n.f(s); }
USE(1) USE(2) USE(3) USE(4) USE(5)
"""

GIT_SCRIPT = """
set -e
rm -rf repo
git init -q -b main repo
cd repo
git fast-import --quiet < ../stream
git repack -adq -f --depth=50 --window=50
git log --format='%H %s' | head -3
git count-objects -v | grep -E '^(count|in-pack)'
git log --stat --format='%s' | wc -c
"""


def git_stream(path):
    """A fast-import stream: 700 commits changing some of 150 files each."""
    with open(path, "w") as f:
        content = {i: [f"line {j} of file {i}\n" for j in range(200)] for i in range(150)}
        for c in range(1, 701):
            f.write(f"commit refs/heads/main\nmark :{c}\n"
                    f"author A <a@b> {1700000000 + c} +0000\ncommitter A <a@b> {1700000000 + c} +0000\n")
            msg = f"commit {c}\n"
            f.write(f"data {len(msg)}\n{msg}")
            if c > 1:
                f.write(f"from :{c - 1}\n")
            for i in range(c % 7, 150, 13):
                lines = content[i]
                lines[(c * 31) % len(lines)] = f"changed in {c}: {'z' * (c % 60)}\n"
                if c % 5 == 0:
                    lines.append(f"appended {c}\n")
                data = "".join(lines).encode()
                f.write(f"M 644 inline f{i}.txt\ndata {len(data)}\n")
                f.write(data.decode())
            f.write("\n")


def postscript(path):
    """A page of many strokes, fills and text for Ghostscript to rasterize."""
    with open(path, "w") as f:
        f.write("%!PS\n/Helvetica findfont 9 scalefont setfont\n")
        for i in range(20000):
            x, y = (i * 37) % 580 + 10, (i * 53) % 780 + 10
            f.write(f"newpath {x} {y} moveto {x + (i % 40)} {y + (i % 30)} lineto "
                    f"{x + (i % 17)} {y + (i % 23)} {3 + i % 9} 0 360 arc "
                    f"{(i % 10) / 10} setgray {'fill' if i % 2 else 'stroke'}\n")
            if i % 3 == 0:
                f.write(f"{x} {y} moveto (text {i}) show\n")
        f.write("showpage\n")


def smt(path):
    """A pigeonhole problem (10 pigeons, 9 holes: unsat) plus bit-vector arithmetic."""
    with open(path, "w") as f:
        p, h = 10, 9
        for i in range(p):
            for j in range(h):
                f.write(f"(declare-const x{i}_{j} Bool)\n")
        for i in range(p):
            f.write("(assert (or " + " ".join(f"x{i}_{j}" for j in range(h)) + "))\n")
        for j in range(h):
            for a in range(p):
                for b in range(a + 1, p):
                    f.write(f"(assert (not (and x{a}_{j} x{b}_{j})))\n")
        f.write("(check-sat)\n(reset)\n")
        f.write("(declare-const a (_ BitVec 32))\n(declare-const b (_ BitVec 32))\n"
                "(assert (= (bvmul a b) #x0001e240))\n(assert (bvugt a #x00000001))\n"
                "(assert (bvugt b #x00000001))\n(assert (bvult a b))\n(check-sat)\n")


class App:
    def __init__(self, name, package, binary, cmd, prepare=None, stdin=None, env=None,
                 compare=True, check=None, server=False):
        self.name, self.package, self.binary = name, package, binary
        self.cmd, self.prepare, self.stdin, self.env = cmd, prepare, stdin, env or {}
        self.compare, self.check, self.server = compare, check, server


def write(name, text):
    def prepare(work):
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    return prepare


APPS = [
    App("sqlite3 (in-memory)", "sqlite3", "sqlite3", ["sqlite3", ":memory:"],
        write("script.sql", SQLITE_SCRIPT), stdin="script.sql"),
    App("python3 (PYTHONMALLOC=malloc)", "python3", "python3", ["python3", "work.py"],
        write("work.py", PYTHON_SCRIPT), env={"PYTHONMALLOC": "malloc"}),
    App("perl", "perl", "perl", ["perl", "work.pl"], write("work.pl", PERL_SCRIPT)),
    App("lua5.4", "lua5.4", "lua5.4", ["lua5.4", "work.lua"], write("work.lua", LUA_SCRIPT)),
    App("g++ (cc1plus, templates)", "g++", "g++",
        ["sh", "-c", "g++ -std=c++17 -O1 -c heavy.cc -o heavy.o && sha256sum heavy.o"],
        write("heavy.cc", CXX_SOURCE)),
    App("git (fast-import, repack, log)", "git", "git", ["sh", "git.sh"],
        lambda w: (write("git.sh", GIT_SCRIPT)(w), git_stream(os.path.join(w, "stream")))),
    App("ghostscript", "ghostscript", "gs",
        ["sh", "-c", "gs -q -dNOPAUSE -dBATCH -dSAFER -sDEVICE=ppmraw -r300 -sOutputFile=out.ppm "
                     "page.ps && sha256sum out.ppm"],
        lambda w: postscript(os.path.join(w, "page.ps"))),
    App("z3", "z3", "z3", ["z3", "-smt2", "problem.smt2"],
        lambda w: smt(os.path.join(w, "problem.smt2"))),
    App("rocksdb db_bench", "rocksdb-tools", "db_bench",
        ["db_bench", "--benchmarks=fillrandom,overwrite,readrandom", "--num=150000",
         "--value_size=200", "--db=db", "--compression_type=none", "--threads=1",
         "--seed=12345", "--statistics=0"], compare=False,
        check=lambda out: b"readrandom" in out and b"found" in out),
    App("redis-server + redis-benchmark", "redis-server redis-tools", "redis-server", None,
        compare=False, server=True),
]


def redis_run(lib, work):
    """redis-server under lib ("" = its own jemalloc), driven by redis-benchmark on
    loopback: (wall seconds of the benchmark, the server's peak RSS in KiB, ok)."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    env = preload_env(lib)
    server = subprocess.Popen(["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", work, "--logfile",
                               os.path.join(work, "redis.log")], env=env)
    cli = ["redis-cli", "-p", port]
    try:
        for _ in range(100):
            if subprocess.run(cli + ["ping"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        t0 = time.monotonic()
        bench = subprocess.run(["redis-benchmark", "-p", port, "-q", "-n", "300000", "-P", "16",
                                "-r", "200000", "-d", "200", "-t", "set,get,lpush,lpop,sadd,hset"],
                               capture_output=True)
        wall = time.monotonic() - t0
        keys = subprocess.run(cli + ["dbsize"], capture_output=True, text=True).stdout.strip()
        with open(f"/proc/{server.pid}/status") as f:
            hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM"))
        return wall, hwm, bench.returncode == 0 and keys.isdigit() and int(keys) > 1000
    finally:
        subprocess.run(cli + ["shutdown", "nosave"], capture_output=True)
        server.wait()
