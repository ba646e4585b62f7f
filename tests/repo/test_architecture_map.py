"""docs/architecture.md cannot drift: its table of gRPC edges is what the code does,
both ways, and every repository path it names exists.

The code is read, never run: each package's files are parsed, and a stub's use is
found where `<name>_pb2_grpc.<Service>Stub` is written (built, or in a type), and an
RPC where a method of a Waybill service is named on a stub. A stub is known by the
name it is held under (`peers.admission`, `self.journal`, `runner`: the service's
name in lower case; the gateway's `inbound` is the Channels stub), or by the
`<Service>Stub(...)` it is called on.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tests.support.paths import REPO

ROOT = REPO
DOC = ROOT / "docs" / "architecture.md"
PROTOS = ROOT / "protos" / "waybill" / "v1"
TABLE_HEADING = "## Who calls whom"

# The packages whose calls the map lists, as the table names them (`gateway/`).
PACKAGES = (
    "gateway",
    "services/admission",
    "services/runner",
    "services/journal",
    "services/delivery",
    "cli",
    "common",
)

# Names a stub is held under that are not its service's name in lower case.
OTHER_RECEIVERS = {"inbound": "Channels"}

# A backticked span naming a file or folder of the repository.
TOP_FOLDERS = (
    "bench",
    "cli",
    "common",
    "deploy",
    "docs",
    "gateway",
    "protos",
    "services",
    "tests",
    "waybill",
)
PATH_LIKE = re.compile(r"^(?:" + "|".join(TOP_FOLDERS) + r")(?:/[\w.\-]*)*$")
FILE_LIKE = re.compile(r"^[\w.\-/]+\.(?:py|proto|md)$")

Edge = tuple[str, str]  # (package, service)


@cache
def rpcs_by_service() -> dict[str, frozenset[str]]:
    """Each Waybill gRPC service and its RPCs, from the .proto files."""
    services: dict[str, set[str]] = defaultdict(set)
    for proto in sorted(PROTOS.glob("*.proto")):
        service = None
        for line in proto.read_text().splitlines():
            if match := re.match(r"\s*service\s+(\w+)", line):
                service = match.group(1)
            elif (match := re.match(r"\s*rpc\s+(\w+)", line)) and service:
                services[service].add(match.group(1))
    assert services, f"no services found in {PROTOS.relative_to(ROOT)}"
    return {name: frozenset(rpcs) for name, rpcs in services.items()}


def receivers() -> dict[str, str]:
    names = {service.lower(): service for service in rpcs_by_service()}
    return names | OTHER_RECEIVERS


def stub_service(name: str) -> str | None:
    """`AdmissionStub` -> `Admission`; None for a stub that is not Waybill's."""
    service = name.removesuffix("Stub")
    return service if name.endswith("Stub") and service in rpcs_by_service() else None


def package_of(path: Path) -> str:
    relative = path.relative_to(ROOT).as_posix()
    return next(p for p in PACKAGES if relative.startswith(p + "/"))


@dataclass
class Findings:
    # (package, service) -> the files that build or name its stub
    stubs: dict[Edge, set[str]] = field(default_factory=lambda: defaultdict(set))
    # (package, service) -> rpc -> the files that call it
    calls: dict[Edge, dict[str, set[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(set))
    )
    # file -> the common/ files it imports
    common_imports: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    # RPC names called on something the test cannot tell the service of
    unknown: list[str] = field(default_factory=list)


def receiver_name(node: ast.expr) -> tuple[str, bool] | None:
    """The name a stub is held under, and whether it is a `<X>Stub(...)` call."""
    if isinstance(node, ast.Attribute):
        return node.attr.lstrip("_"), False
    if isinstance(node, ast.Name):
        return node.id.lstrip("_"), False
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name.endswith("Stub"):
            return name, True
    return None


def common_files(node: ast.ImportFrom) -> set[str]:
    """The common/ files a `from waybill.common... import ...` reads."""
    module = node.module or ""
    for prefix in ("waybill.common", "common"):
        if module == prefix:
            return {f"common/{alias.name}.py" for alias in node.names}
        if module.startswith(prefix + "."):
            return {"common/" + module[len(prefix) + 1 :].replace(".", "/") + ".py"}
    return set()


@cache
def scan() -> Findings:
    services = rpcs_by_service()
    every_rpc = frozenset().union(*services.values())
    held_as = receivers()
    found = Findings()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(), filename=relative)
            imported_stubs: dict[str, str] = {}  # a stub class imported by its own name
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    found.common_imports[relative] |= common_files(node)
                    if (node.module or "").endswith("_pb2_grpc"):
                        for alias in node.names:
                            if service := stub_service(alias.name):
                                imported_stubs[alias.asname or alias.name] = service
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute):
                    value = node.value
                    is_grpc_module = isinstance(value, ast.Name) and value.id.endswith("_pb2_grpc")
                    if is_grpc_module and (service := stub_service(node.attr)):
                        found.stubs[(package, service)].add(relative)
                        continue
                    if node.attr not in every_rpc:
                        continue
                    held = receiver_name(value)
                    if held is None:
                        found.unknown.append(f"{relative}:{node.lineno} .{node.attr}")
                        continue
                    name, is_stub_call = held
                    if is_stub_call:
                        service = stub_service(name) or imported_stubs.get(name)
                        if service is None:
                            continue  # another stub (gRPC's health check): not a contract
                    elif name in held_as:
                        service = held_as[name]
                    else:
                        found.unknown.append(f"{relative}:{node.lineno} {name}.{node.attr}")
                        continue
                    if node.attr not in services[service]:
                        found.unknown.append(
                            f"{relative}:{node.lineno} {name}.{node.attr} "
                            f"({service} has no RPC {node.attr})"
                        )
                        continue
                    found.calls[(package, service)][node.attr].add(relative)
                elif isinstance(node, ast.Name) and node.id in imported_stubs:
                    found.stubs[(package, imported_stubs[node.id])].add(relative)
    return found


@dataclass(frozen=True)
class Row:
    line: int
    package: str
    service: str
    rpcs: tuple[str, ...]


@cache
def table() -> tuple[Row, ...]:
    """The rows of the table under `## Who calls whom`."""
    lines = DOC.read_text().splitlines()
    assert TABLE_HEADING in lines, f"docs/architecture.md has no '{TABLE_HEADING}' section"
    start = lines.index(TABLE_HEADING) + 1
    rows: list[Row] = []
    in_table = False
    for number, line in enumerate(lines[start:], start=start + 1):
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if in_table:
                break
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not in_table:  # the header, then the |---| line
            in_table = True
            assert cells[:3] == ["caller", "service", "RPCs"], (
                f"docs/architecture.md:{number}: the table's columns are {cells}, "
                "expected caller | service | RPCs | ..."
            )
            continue
        if set(line) <= set("|-: "):
            continue
        caller = re.fullmatch(r"`([\w/]+?)/?`", cells[0])
        assert caller, f"docs/architecture.md:{number}: caller {cells[0]!r} is not a `folder/`"
        rpcs = tuple(re.findall(r"`(\w+)`", cells[2]))
        rows.append(Row(number, caller.group(1), cells[1].strip("`"), rpcs))
    assert rows, f"docs/architecture.md: no rows in the table under '{TABLE_HEADING}'"
    return tuple(rows)


def listed() -> dict[Edge, set[str]]:
    edges: dict[Edge, set[str]] = {}
    for row in table():
        edges[(row.package, row.service)] = set(row.rpcs)
    return edges


def files(where: set[str]) -> str:
    return ", ".join(sorted(where))


def test_the_table_is_well_formed() -> None:
    problems = []
    seen: set[Edge] = set()
    services = rpcs_by_service()
    for row in table():
        at = f"docs/architecture.md:{row.line}"
        if row.package not in PACKAGES:
            problems.append(f"{at}: {row.package}/ is not one of {', '.join(PACKAGES)}")
        if row.service not in services:
            problems.append(f"{at}: {row.service} is not a service of {PROTOS.relative_to(ROOT)}")
            continue
        if (row.package, row.service) in seen:
            problems.append(f"{at}: {row.package}/ -> {row.service} is listed twice")
        seen.add((row.package, row.service))
        if not row.rpcs:
            problems.append(f"{at}: {row.package}/ -> {row.service} names no RPC")
        for rpc in row.rpcs:
            if rpc not in services[row.service]:
                problems.append(f"{at}: {row.service} has no RPC {rpc}")
    assert problems == [], "\n".join(problems)


def test_every_rpc_use_is_attributed() -> None:
    """An RPC named on something that is not recognisably a stub would escape the map."""
    unknown = scan().unknown
    assert unknown == [], (
        "RPC names used on something the map's test cannot tie to a service (hold the "
        "stub under its service's name, e.g. `self.journal`, or add the name to "
        "OTHER_RECEIVERS in tests/repo/test_architecture_map.py):\n" + "\n".join(unknown)
    )


def test_listed_edges_are_in_the_code() -> None:
    """Each row's stub is built or used in its caller's package, and each RPC called
    there (directly, or by a common/ helper the package imports)."""
    found = scan()
    problems = []
    for row in table():
        edge = (row.package, row.service)
        at = f"docs/architecture.md:{row.line}"
        if not found.stubs.get(edge):
            problems.append(
                f"{at}: {row.package}/ -> {row.service}, but no {row.service}Stub is "
                f"built or used in {row.package}/"
            )
        direct = found.calls.get(edge, {})
        helpers = {
            common
            for file, commons in found.common_imports.items()
            if package_of(ROOT / file) == row.package
            for common in commons
        }
        via_common = {
            rpc
            for rpc, where in found.calls.get(("common", row.service), {}).items()
            if where & helpers
        }
        for rpc in row.rpcs:
            if rpc not in direct and rpc not in via_common:
                problems.append(f"{at}: {row.package}/ never calls {row.service}.{rpc}")
    assert problems == [], "the map lists calls the code does not make:\n" + "\n".join(problems)


def test_every_edge_in_the_code_is_listed() -> None:
    """A new stub or a new RPC call fails here until docs/architecture.md lists it."""
    found = scan()
    edges = listed()
    problems = []
    for edge in sorted(set(found.stubs) | set(found.calls)):
        package, service = edge
        if edge not in edges:
            where = found.stubs.get(edge, set()) | {
                f for fs in found.calls.get(edge, {}).values() for f in fs
            }
            problems.append(
                f"{package}/ -> {service} (in {files(where)}) has no row in the table under "
                f"'{TABLE_HEADING}'"
            )
            continue
        for rpc, where in sorted(found.calls.get(edge, {}).items()):
            if rpc not in edges[edge]:
                problems.append(
                    f"{package}/ calls {service}.{rpc} (in {files(where)}), "
                    f"but its row does not list `{rpc}`"
                )
    assert problems == [], "docs/architecture.md lacks calls the code makes:\n" + "\n".join(
        problems
    )


def test_the_code_scan_finds_the_known_edges() -> None:
    """The scan itself works: the edges every version of Waybill has are found."""
    calls = scan().calls
    assert "StartRun" in calls[("gateway", "Admission")]
    assert "RenewLeases" in calls[("services/runner", "Admission")]
    assert "AppendStream" in calls[("services/runner", "Journal")]
    assert "WriteReceipt" in calls[("services/runner", "Delivery")]


def named_paths() -> list[tuple[int, str]]:
    """Every backticked span of the page that names a repository path."""
    named = []
    for number, line in enumerate(DOC.read_text().splitlines(), start=1):
        for span in re.findall(r"`([^`\n]+)`", line):
            if PATH_LIKE.match(span) or FILE_LIKE.match(span):
                named.append((number, span))
    return named


def test_named_paths_exist() -> None:
    named = named_paths()
    assert len(named) > 20, "the path check finds almost no paths in docs/architecture.md"
    missing = [
        f"docs/architecture.md:{number}: `{span}`"
        for number, span in named
        if not (ROOT / span.rstrip("/")).exists()
    ]
    assert missing == [], "paths named in docs/architecture.md that do not exist:\n" + "\n".join(
        missing
    )
