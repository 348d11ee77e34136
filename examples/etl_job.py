"""An ETL job whose loads are paced: at most ``--rate`` batches (default ``2/second``) reach the
database, as if it were an API that allows no more.

It extracts orders from a CSV file (columns ``id,customer,amount``; without ``--input``, 25 sample
rows), transforms them (customer names tidied, amounts in cents) and loads them into a SQLite
table in batches of ``--batch-size``. ``@permits.limit`` makes each call of ``load`` wait,
blocking, until the limit allows it: the job never needs to sleep or count by itself.

Run it (``pip install permits``; SQLite comes with Python)::

    python examples/etl_job.py --input examples/orders.csv --database orders.sqlite3 --batch-size 10 --rate 2/second

(``examples/orders.csv`` is a sample of 36 orders.)

The settings can also come from the environment: ``ETL_INPUT``, ``ETL_DATABASE``, ``ETL_RATE``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from itertools import islice

import permits

#: An order as loaded: (id, customer, amount in cents).
Row = tuple[int, str, int]
SAMPLE = "id,customer,amount\n" + "".join(f"{n},  customer {n % 4} ,{n * 1.25:.2f}\n" for n in range(1, 26))


def extract(source: Iterable[str]) -> Iterator[dict[str, str]]:
    yield from csv.DictReader(source)


def batches_of(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    it = iter(rows)
    while batch := list(islice(it, size)):
        yield batch


def transform(rows: Iterable[dict[str, str]]) -> Iterator[Row]:
    for row in rows:
        yield int(row["id"]), " ".join(row["customer"].split()).title(), round(float(row["amount"]) * 100)


def run(source: Iterable[str], database: str, batch_size: int, rate: str) -> None:
    started = time.monotonic()
    with contextlib.closing(sqlite3.connect(database)) as db:
        db.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, customer TEXT, cents INTEGER)")

        @permits.limit(rate)  # each call waits (blocking the thread) until the rate allows it
        def load(batch: list[Row]) -> float:
            granted = time.monotonic()  # the permit is held from here to the return
            db.executemany("INSERT OR REPLACE INTO orders VALUES (?, ?, ?)", batch)
            db.commit()
            return granted - started

        rows = batches = 0
        for batch in batches_of(transform(extract(source)), batch_size):
            at = load(batch)
            rows += len(batch)
            batches += 1
            print(f"batch {batches}: {len(batch)} rows, loaded at +{at:.3f} s", flush=True)
    print(f"loaded {rows} rows in {batches} batches into {database}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", default=os.environ.get("ETL_INPUT"), help="a CSV file (default: sample rows)")
    parser.add_argument("--database", default=os.environ.get("ETL_DATABASE", "orders.sqlite3"))
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--rate", default=os.environ.get("ETL_RATE", "2/second"), help="batches, e.g. 2/second")
    args = parser.parse_args()
    if args.input is None:
        run(io.StringIO(SAMPLE), args.database, args.batch_size, args.rate)
    else:
        with open(args.input, newline="") as source:
            run(source, args.database, args.batch_size, args.rate)


if __name__ == "__main__":
    main()
