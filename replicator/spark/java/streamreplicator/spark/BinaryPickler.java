package streamreplicator.spark;

import java.io.IOException;
import java.io.OutputStream;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import net.razorvine.pickle.IObjectPickler;
import net.razorvine.pickle.Opcodes;
import net.razorvine.pickle.PickleException;
import net.razorvine.pickle.Pickler;
import org.apache.spark.sql.execution.python.EvaluatePython;

/**
 * Spark's binary values pickled for Python as one BINBYTES opcode and the bytes themselves.
 * Spark's own pickler for them (EvaluatePython's BytesWrapperPickler, through Pyrolite) writes
 * bytes(bytearray(s, 'latin-1')), s the value as a Java string built one char per byte and then
 * encoded as UTF-8: a sampled query sends every bucket's sender table to Python that way, every
 * batch, and that was over a third of the JVM's samples at 100,000 senders. Python unpickles both
 * to the same bytes object. Pyrolite's picklers are registered once per JVM, by class, in one
 * static map; install() puts this one in the place of Spark's.
 */
public final class BinaryPickler implements IObjectPickler {
  static final String WRAPPER = "org.apache.spark.sql.execution.python.EvaluatePython$BytesWrapper";
  private static boolean installed = false;

  private final MethodHandle data;

  private BinaryPickler(MethodHandle data) {
    this.data = data;
  }

  /**
   * Registers this pickler for Spark's binary values in this JVM (the driver's and, in local mode,
   * its executors'). Spark's picklers are registered first: they are registered once, and later
   * would replace this one. Returns false where Spark's wrapper class is not found (another
   * Spark), leaving Spark's pickler.
   */
  public static synchronized boolean install() throws ReflectiveOperationException {
    if (installed) {
      return true;
    }
    Class<?> wrapper;
    try {
      wrapper = Class.forName(WRAPPER);
    } catch (ClassNotFoundException e) {
      return false;
    }
    MethodHandle data =
        MethodHandles.publicLookup()
            .findVirtual(wrapper, "data", MethodType.methodType(byte[].class))
            .asType(MethodType.methodType(byte[].class, Object.class));
    EvaluatePython.registerPicklers();
    Pickler.registerCustomPickler(wrapper, new BinaryPickler(data));
    installed = true;
    return true;
  }

  @Override
  public void pickle(Object o, OutputStream out, Pickler pickler)
      throws PickleException, IOException {
    byte[] bytes;
    try {
      bytes = (byte[]) data.invokeExact(o);
    } catch (RuntimeException | Error e) {
      throw e;
    } catch (Throwable e) {
      throw new PickleException("cannot read a binary value: " + e);
    }
    int n = bytes.length;
    out.write(Opcodes.BINBYTES);
    out.write(n & 0xff);
    out.write((n >>> 8) & 0xff);
    out.write((n >>> 16) & 0xff);
    out.write((n >>> 24) & 0xff);
    out.write(bytes);
  }
}
