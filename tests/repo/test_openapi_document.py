"""The OpenAPI document the gateway serves (`/openapi.json`) is the same in every
process: clients generate code from it, and a diff between two deploys of one
build must mean nothing changed."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from waybill.common.settings import Settings
from waybill.gateway.app import create_app

DOCUMENT_DIGEST = (
    "import hashlib, json, warnings; warnings.simplefilter('error');"
    "from waybill.common.settings import Settings;"
    "from waybill.gateway.app import create_app;"
    "document = create_app(Settings()).openapi();"
    "print(hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest())"
)


def test_every_operation_has_an_id_of_its_own() -> None:
    paths = create_app(Settings()).openapi()["paths"]
    ids = Counter(
        operation["operationId"] for item in paths.values() for operation in item.values()
    )
    assert [name for name, count in ids.items() if count > 1] == []


def test_the_document_does_not_depend_on_the_process_s_hash_seed() -> None:
    """Each process hashes strings with its own seed: a route whose id came from a
    set's order (one route for two methods did) made a different document."""
    digests = {
        subprocess.run(
            [sys.executable, "-c", DOCUMENT_DIGEST],
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3", "4")
    }
    assert len(digests) == 1 and all(len(d) == 64 for d in digests)
