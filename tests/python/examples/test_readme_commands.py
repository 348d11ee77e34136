"""The commands of examples/README.md work as written from a fresh clone: the ETL job on the sample
CSV that ships beside it, the scraper against the sample site (the README's two commands, the site
on a free port instead of the README's), and every program named there has a command."""

from __future__ import annotations

import csv
import os
import re
import sqlite3
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from _programs import EXAMPLES, LIMIT, check_clean, command, run, serving
from _readme import program_args, readme_commands, without_option
from _support import need


def test_every_program_has_its_command_and_every_command_its_program() -> None:
    programs = {path.name for path in EXAMPLES.glob("*.py")}
    assert set(readme_commands()) == programs


def test_etl_command_loads_the_sample_csv(tmp_path: Path) -> None:
    args = program_args(readme_commands()["etl_job.py"], "etl_job.py")
    # From the root of the clone, as written; the database the job writes (orders.sqlite3 in the
    # current folder by default) goes to the test's folder instead, by the job's own setting.
    database = tmp_path / "orders.sqlite3"
    done = subprocess.run(
        [*command("etl_job.py"), *args],
        cwd=EXAMPLES.parent,
        env={**os.environ, "ETL_DATABASE": str(database)},
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    check_clean(done.returncode, done.stdout, done.stderr)
    source = EXAMPLES.parent / args[args.index("--input") + 1]
    with source.open(newline="") as rows:
        orders = list(csv.DictReader(rows))
    assert len(orders) >= 20, "a sample of a few dozen rows"
    batches = -(-len(orders) // 10)  # the default --batch-size
    assert done.stdout.splitlines()[-1] == f"loaded {len(orders)} rows in {batches} batches into {database}"
    with sqlite3.connect(database) as db:
        loaded = db.execute("SELECT id, customer, cents FROM orders ORDER BY id").fetchall()
    assert [row[0] for row in loaded] == sorted(int(order["id"]) for order in orders)
    # The transform tidied every name (no stray spaces, title case) and counted cents exactly.
    assert all(name == " ".join(name.split()).title() for _, name, _ in loaded)
    assert sum(cents for _, _, cents in loaded) == sum(round(float(order["amount"]) * 100) for order in orders)


@pytest.mark.timeout(120)
def test_scraper_command_fetches_every_page_of_the_sample_site(tmp_path: Path) -> None:
    need("aiohttp")
    need("httpx")
    commands = readme_commands()
    site = program_args(commands["sample_site.py"], "sample_site.py")
    scraper = program_args(commands["async_scraper.py"], "async_scraper.py")
    site_args, site_port = without_option(site, "--port")
    scraper_args, base_url = without_option(scraper, "--base-url")
    assert base_url == f"http://127.0.0.1:{site_port}", "the scraper's command must point at the site's"
    pages = int(scraper_args[scraper_args.index("--pages") + 1])
    with serving("sample_site.py", *site_args, tmp_path=tmp_path) as service:
        out = run("async_scraper.py", "--base-url", service.url, *scraper_args)
        log = service.output()
    assert out.splitlines()[-1].startswith(f"fetched {pages} of {pages} pages"), out
    # The site's access log: every page answered 200 once, after any 429 it sent for it.
    answers: dict[int, list[int]] = defaultdict(list)
    for page, status in re.findall(r'"GET /page/(\d+) HTTP/1\.1" (\d+)', log):
        answers[int(page)].append(int(status))
    assert sorted(answers) == list(range(1, pages + 1)), log
    assert all(statuses[-1] == 200 and set(statuses[:-1]) <= {429} for statuses in answers.values()), answers


def test_sample_site_refuses_beyond_its_limit_with_retry_after(tmp_path: Path) -> None:
    need("aiohttp")
    import httpx

    # Its limit per client: 3 a minute, so that the clock cannot hand out a fourth during the test.
    with (
        serving("sample_site.py", "--limit", "3/minute", tmp_path=tmp_path) as site,
        httpx.Client(base_url=site.url, timeout=20) as client,
    ):
        answers = [client.get(f"/page/{n}") for n in range(1, 5)]
        health = client.get("/health")  # not limited
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].text == "page 1"
    assert 0 < int(answers[3].headers["Retry-After"]) <= 64, answers[3].headers
    assert health.status_code == 200
