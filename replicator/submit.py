"""The application file for `spark-submit`: the same as `stream-replicator run`, with the
master, resources and Python environment that spark-submit was given.

    spark-submit --master spark://host:7077 \\
        --archives stream-replicator-env.tar.gz#environment \\
        --conf spark.pyspark.python=./environment/bin/python \\
        "$(stream-replicator submit-file)" --config /etc/stream-replicator/sr.yaml

`make dist` puts a copy of this file beside the wheel (dist/stream_replicator_submit.py)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from replicator.cli import main as cli_main

    args = sys.argv[1:] if argv is None else argv
    sys.argv = [sys.argv[0], "run", *args]
    cli_main()


if __name__ == "__main__":
    main()
