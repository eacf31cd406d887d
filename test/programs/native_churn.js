// test/programs/native_churn.js — a Node.js program whose native memory goes through
// malloc: 4 worker threads fill Buffers of many sizes (their backing stores are
// calloc'd outside V8's heap), deflate and inflate them (zlib's state), and keep a
// window of them; JSON of the results crosses threads. Prints a checksum per worker:
// deterministic, compared with the run under glibc.
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');
const zlib = require('zlib');
const crypto = require('crypto');

if (isMainThread) {
  const rounds = Number(process.argv[2] || 3000);
  const results = [];
  let done = 0;
  for (let id = 0; id < 4; id++) {
    const w = new Worker(__filename, { workerData: { id, rounds } });
    w.on('message', (m) => {
      results[m.id] = m;
      if (++done === 4) for (const r of results) console.log(`worker ${r.id} ${r.digest} ${r.bytes}`);
    });
    w.on('error', (e) => { console.error(e); process.exitCode = 1; });
  }
} else {
  const { id, rounds } = workerData;
  const hash = crypto.createHash('sha256');
  const window = [];
  let seed = BigInt(id + 1) * 0x9E3779B97F4A7C15n & 0xFFFFFFFFFFFFFFFFn, bytes = 0;
  for (let r = 0; r < rounds; r++) {
    seed = (seed * 6364136223846793005n + 1442695040888963407n) & 0xFFFFFFFFFFFFFFFFn;
    const size = 64 + Number((seed >> 33n) % 60000n);
    const b = Buffer.alloc(size);
    for (let i = 0; i < size; i += 8) b[i] = (i * 31 + r + id) & 255;
    const back = zlib.inflateSync(zlib.deflateSync(b, { level: r % 9 + 1 }));
    if (back.length !== size) throw new Error(`inflated ${back.length} of ${size}`);
    hash.update(back);
    bytes += size;
    window.push(b);
    if (window.length > 64) window.shift();
  }
  parentPort.postMessage(JSON.parse(JSON.stringify({ id, digest: hash.digest('hex').slice(0, 16), bytes })));
}
