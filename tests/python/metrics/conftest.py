"""The metrics tests also use the integration tests' servers (_integration: serve_wsgi)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "integrations"))
