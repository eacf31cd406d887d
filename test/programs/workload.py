# test/programs/workload.py — a Python workload for the real-program test: builds and
# sorts dicts, lists and strings, and round-trips JSON. Deterministic output.
import json
import random

random.seed(12345)
people = [{"name": "".join(random.choice("abcdefghij") for _ in range(random.randint(3, 40))),
           "age": random.randint(1, 99),
           "tags": [random.random() for _ in range(random.randint(0, 30))]}
          for _ in range(60000)]
people.sort(key=lambda p: (p["age"], p["name"]))
index = {}
for p in people:
    index.setdefault(p["name"][:3], []).append(p["age"])
text = json.dumps(people)
back = json.loads(text)
assert back == people
words = " ".join(p["name"] for p in people).split()
counts = {}
for w in words:
    counts[w] = counts.get(w, 0) + 1
big = [str(i) * (i % 50) for i in range(100000)]
big.sort()
print(len(text), len(index), sum(sum(v) for v in index.values()))
print(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5])
print(big[-1][:20], len("".join(big)))
