// test/programs/NativeChurn.java — a JVM program whose native memory goes through
// malloc: 16 threads allocate direct ByteBuffers (Unsafe.allocateMemory -> malloc),
// deflate and inflate them (zlib's state is malloc'd), and keep a window of them, with
// a small Java heap (-Xmx) so the collector frees the buffers' native memory as it
// runs. Prints a checksum per thread: deterministic, compared with the run under glibc.
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.zip.CRC32;
import java.util.zip.Deflater;
import java.util.zip.Inflater;

public class NativeChurn {
  static long work(int id, int rounds) throws Exception {
    CRC32 crc = new CRC32();
    ArrayDeque<ByteBuffer> window = new ArrayDeque<>();
    long seed = 0x9E3779B97F4A7C15L * (id + 1);
    byte[] packed = new byte[1 << 17];
    for (int r = 0; r < rounds; r++) {
      seed = seed * 6364136223846793005L + 1442695040888963407L;
      int size = 64 + (int) ((seed >>> 33) % 60000);
      ByteBuffer b = ByteBuffer.allocateDirect(size);
      for (int i = 0; i < size; i += 8) b.put(i, (byte) (i * 31 + r + id));
      byte[] plain = new byte[size];
      b.get(0, plain);
      Deflater d = new Deflater(r % 9 + 1);
      d.setInput(plain);
      d.finish();
      int n = d.deflate(packed);
      d.end();
      Inflater inf = new Inflater();
      inf.setInput(packed, 0, n);
      byte[] back = new byte[size];
      int m = inf.inflate(back);
      inf.end();
      if (m != size) throw new IllegalStateException("inflated " + m + " of " + size);
      crc.update(back);
      window.addLast(b);
      if (window.size() > 64) window.removeFirst();
    }
    return crc.getValue();
  }

  public static void main(String[] args) throws Exception {
    int threads = 16, rounds = args.length > 0 ? Integer.parseInt(args[0]) : 2000;
    long[] sums = new long[threads];
    Thread[] t = new Thread[threads];
    for (int i = 0; i < threads; i++) {
      final int id = i;
      t[i] = new Thread(() -> {
        try {
          sums[id] = work(id, rounds);
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
      });
      t[i].start();
    }
    for (Thread x : t) x.join();
    for (int i = 0; i < threads; i++) System.out.println("thread " + i + " crc " + Long.toHexString(sums[i]));
  }
}
