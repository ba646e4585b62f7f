"""Generate the Python gRPC stubs in `waybill/v1` from `protos/`.

`python -m waybill.common.contracts` is what `make proto` runs. The generated files are
committed so that a fresh clone imports them; a test regenerates them into a
temporary folder and fails when the committed copy is stale.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"


def proto_files() -> list[Path]:
    return sorted((PROTO_ROOT / "waybill" / "v1").glob("*.proto"))


def _plugin(name: str) -> str:
    """A protoc plugin installed beside this Python (mypy-protobuf's), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} is not installed (mypy-protobuf): run `make setup`")
    return f"--plugin={name}={found}"


def generate(out_dir: Path) -> None:
    """Write `waybill/v1/*_pb2*.py` and their typed stubs: protoc's own for the
    messages (an enum field is typed as its enum, as the code annotates it), and
    mypy-protobuf's for the stubs and servicer base classes, so that every servicer
    method is checked against its RPC's request and reply."""
    out_dir.mkdir(parents=True, exist_ok=True)
    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        _plugin("protoc-gen-mypy_grpc"),
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_grpc_out=quiet:{out_dir}",
        *[str(p) for p in proto_files()],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the message above")
    for package in (out_dir / "waybill", out_dir / "waybill" / "v1"):
        init = package / "__init__.py"
        if not init.exists():
            init.write_text('"""Generated gRPC contracts (see protos/)."""\n')


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT)
    print("generated stubs in waybill/v1")
