"""The committed gRPC stubs match the .proto files, and every field is documented."""

from __future__ import annotations

import re
from pathlib import Path

from waybill.common.contracts import generate, proto_files


def test_generated_stubs_are_fresh(tmp_path: Path, repo_root: Path) -> None:
    generate(tmp_path)
    fresh = sorted((tmp_path / "waybill" / "v1").glob("*_pb2*.py*"))
    assert fresh, "protoc produced nothing"
    for path in fresh:
        committed = repo_root / "waybill" / "v1" / path.name
        assert committed.exists(), f"{path.name} is missing: run `make proto`"
        assert committed.read_text() == path.read_text(), f"{path.name} is stale: run `make proto`"


FIELD = re.compile(r"^\s*(repeated\s+)?[\w.]+\s+\w+\s*=\s*\d+;")


def test_every_field_has_a_comment() -> None:
    fields = 0
    for proto in proto_files():
        lines = proto.read_text().splitlines()
        for number, line in enumerate(lines):
            if not FIELD.match(line) or line.strip().startswith("//"):
                continue
            fields += 1
            above = lines[number - 1].strip()
            # A field is documented by the comment right above it, or shares the
            # comment of the field above it (e.g. created_at / updated_at).
            assert above.startswith("//") or FIELD.match(lines[number - 1]), (
                f"{proto.name}:{number + 1} has no comment: {line.strip()}"
            )
    assert fields > 0, "no field found in the .proto files"
