package streamreplicator.hadoop;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system, but setting a file's permission bits in the JVM. Without Hadoop's
 * native library (pyspark ships none) RawLocalFileSystem forks a chmod process for every file
 * and directory it creates with a permission: every checkpoint file Spark writes, ~2.5-3 ms each.
 * Files.setPosixFilePermissions makes the same chmod(2) call without the fork. What it cannot do
 * the way Hadoop's `chmod 0NNN` does still goes through Hadoop's own path: the sticky bit, a
 * directory's setuid and setgid bits (GNU chmod keeps them for a 4-digit mode; chmod(2) would
 * clear them), and paths or file systems java.nio cannot name.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {
  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
    PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
    PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
    PosixFilePermission.OWNER_READ,
  };
  private static final int DIRECTORY = 0040000;
  private static final int FILE_TYPE = 0170000;
  private static final int SET_ID_BITS = 06000;

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    short mode = permission.toShort();
    java.nio.file.Path file;
    try {
      file = pathToFile(p).toPath();
    } catch (InvalidPathException e) {
      super.setPermission(p, permission);
      return;
    }
    if ((mode & ~0777) != 0 || isDirectoryWithSetIdBits(file)) {
      super.setPermission(p, permission);
      return;
    }
    Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
    for (int i = 0; i < BITS.length; i++) {
      if ((mode & (1 << i)) != 0) {
        bits.add(BITS[i]);
      }
    }
    try {
      Files.setPosixFilePermissions(file, bits);
    } catch (NoSuchFileException e) {
      FileNotFoundException missing = new FileNotFoundException("File " + p + " does not exist");
      missing.initCause(e);
      throw missing;
    } catch (UnsupportedOperationException e) {
      super.setPermission(p, permission);
    }
  }

  private static boolean isDirectoryWithSetIdBits(java.nio.file.Path file) {
    try {
      int mode = (Integer) Files.getAttribute(file, "unix:mode"); // follows links, as chmod does
      return (mode & FILE_TYPE) == DIRECTORY && (mode & SET_ID_BITS) != 0;
    } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
      return false; // missing: setPosixFilePermissions says so
    }
  }
}
