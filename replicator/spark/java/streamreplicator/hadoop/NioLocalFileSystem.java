package streamreplicator.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's checksummed local file system (the class Spark's RocksDB state store and Hadoop's
 * local buffers ask for) over NioRawLocalFileSystem: no chmod process per file it creates.
 */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
