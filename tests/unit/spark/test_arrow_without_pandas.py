"""A copy-only driver's pyarrow builds its batches without importing pandas, and a conversion
to pandas still works when something asks for one."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
from replicator.spark.arrow_without_pandas import pyarrow_without_pandas
print(pyarrow_without_pandas())
from replicator.nats.readers import RawMessage
from replicator.spark.rows import to_record_batch
import pyarrow as pa
msgs = [RawMessage(subject="a.b", data=b"x" * 10, headers=[("h", "1")], seq=i, ts_ns=i * 1000) for i in (1, 2)]
table = pa.Table.from_batches([to_record_batch("S", msgs)])
print("pandas" in sys.modules, table.num_rows, table.column("seq").to_pylist())
print(list(table.to_pandas()["seq"]), "pandas" in sys.modules)
print(pyarrow_without_pandas())
"""


def test_batches_are_built_without_pandas_and_to_pandas_still_works() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:4] == ["True", "False 2 [1, 2]", "[1, 2] True", "False"], out
