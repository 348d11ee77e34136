"""`import permits` (and `import permits.metrics`) imports neither exporter library; instrument()
without them raises an ImportError naming the extra."""

from __future__ import annotations

import json
import subprocess
import sys


def modules_after(code: str) -> set[str]:
    code += "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {name.split(".")[0] for name in json.loads(out.splitlines()[-1])}


def test_import_permits_imports_no_exporter() -> None:
    loaded = modules_after("import permits, permits.metrics")
    assert "prometheus_client" not in loaded and "opentelemetry" not in loaded


def test_instrument_without_the_libraries_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['prometheus_client'] = None\n"  # (an import of it fails, as when not installed)
        "import permits\nfrom permits.metrics import instrument\n"
        "try:\n    instrument(permits.TokenBucketLimiter(1, 1, 1.0))\n"
        "except ImportError as exc:\n    print('ImportError:', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "ImportError:" in out and "permits[metrics]" in out
