"""Typed results: dataclasses over the API's JSON objects (docs/api.md).

Each keeps the whole reply in ``raw`` (fields a newer daemon adds are
there before this SDK names them); fields the reply lacks are None.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Generic, List, Optional, Type, TypeVar

T = TypeVar("T")


def from_json(cls: Type[T], obj: Dict[str, Any]) -> T:
    """An instance of dataclass ``cls`` from a JSON object, unknown keys kept in ``raw``."""
    names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
    return cls(**{k: v for k, v in obj.items() if k in names}, raw=obj)  # type: ignore[call-arg]


@dataclass
class Page(Generic[T]):
    """One page of a list: ``data``, and ``has_more`` when it was cut."""

    data: List[T]
    has_more: bool


@dataclass
class SandboxInfo:
    """A sandbox as the API last described it."""

    id: str = ""
    status: Optional[str] = None  # running | paused | destroyed | expired | failed
    size: Optional[str] = None
    created_at: Optional[str] = None
    expires_at: Optional[str] = None
    ended_at: Optional[str] = None
    cost_micro_usd: Optional[int] = None
    cost_usd: Optional[str] = None
    startup_path: Optional[str] = None  # warm | cold
    startup_ms: Optional[int] = None
    metadata: Dict[str, str] = field(default_factory=dict)  # labels (docs/api.md, Metadata)
    paused_at: Optional[str] = None  # while paused: when the pause began
    paused_bytes: Optional[int] = None  # while paused: what it keeps on its host
    paused_seconds: int = 0  # the pauses already resumed, added up
    # its egress policy, {"egress", "allow", "deny"} (docs/network.md)
    network: Dict[str, Any] = field(default_factory=dict)
    net_bytes_in: int = 0  # relayed toward the guest (0 until egress is wired)
    net_bytes_out: int = 0  # relayed from the guest
    snapshot: Optional[str] = None  # the snapshot its disk started from (docs/api.md "Snapshots")
    timeout_action: str = "expire"  # what its expiry does: "expire" or "pause"
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class SandboxMetrics:
    """``GET /v1/sandboxes/{id}/metrics``: the guest's samples, oldest first.

    Each sample is a dict: ``at``, ``cpu_cores`` and ``disk_used_mib``
    (host-observed), ``memory_used_mib`` (the guest's own word, ``None``
    when it did not report). ``interval_ms`` 0: the operator turned
    sampling off, and ``samples`` is empty."""

    sandbox_id: str = ""
    interval_ms: int = 0
    history: int = 0
    samples: List[Dict[str, Any]] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class ReceiptRef:
    """The receipt a reply carries; the full receipt is ``Client.receipt(id)``."""

    id: str = ""
    hash: Optional[str] = None
    signature: Optional[str] = None
    signer: Optional[str] = None
    url: Optional[str] = None
    fingerprint_salt: Optional[str] = None  # exec receipts only
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class ExecResult:
    """The reply of a (buffered) exec."""

    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = None
    duration_ms: Optional[int] = None
    truncated: bool = False
    timed_out: bool = False
    receipt: Optional[ReceiptRef] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.receipt, dict):
            self.receipt = from_json(ReceiptRef, self.receipt)


@dataclass
class ExecEvent:
    """One event of a streamed exec: ``stdout``/``stderr`` with ``data``, or
    the final ``exit`` (an ``error`` event is raised as its exception)."""

    type: str = ""
    data: Optional[str] = None
    exit_code: Optional[int] = None
    duration_ms: Optional[int] = None
    truncated: Optional[bool] = None
    timed_out: Optional[bool] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class FileInfo:
    """The answer of an upload: a file (``object == "file"``) or a tree."""

    object: str = ""
    path: str = ""
    size: Optional[int] = None
    mode: Optional[str] = None
    sha256: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class FileEntry:
    """One entry of a directory listing."""

    name: str = ""
    type: str = ""  # file | dir | symlink | other
    size: Optional[int] = None
    mode: Optional[str] = None
    mtime: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class ProcessOutput:
    """Output of a background process since the offsets asked for."""

    pid: int = 0
    status: Optional[str] = None  # running | exited
    exit_code: Optional[int] = None
    stdout: str = ""
    stdout_offset: int = 0
    stdout_next_offset: int = 0
    stdout_lost_bytes: int = 0
    stdout_total: int = 0
    stderr: str = ""
    stderr_offset: int = 0
    stderr_next_offset: int = 0
    stderr_lost_bytes: int = 0
    stderr_total: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def complete(self) -> bool:
        """True when the process has exited and everything it wrote was read."""
        return (
            self.status == "exited"
            and self.stdout_next_offset >= self.stdout_total
            and self.stderr_next_offset >= self.stderr_total
        )


@dataclass
class ProcessResult:
    """What :meth:`Process.wait` collected."""

    pid: int
    exit_code: Optional[int]
    stdout: str
    stderr: str
    lost_bytes: int = 0  # overwritten in the guest's ring before they were read


@dataclass
class Usage:
    """``GET /v1/usage``."""

    balance_micro_usd: int = 0
    balance_usd: Optional[str] = None
    reserved_micro_usd: int = 0
    available_micro_usd: int = 0
    consumed_micro_usd: int = 0
    by_size: Dict[str, Any] = field(default_factory=dict)
    sandboxes: Dict[str, Any] = field(default_factory=dict)
    network: Dict[str, Any] = field(default_factory=dict)  # {bytes_in, bytes_out} (docs/network.md)
    period: Dict[str, Any] = field(default_factory=dict)
    buckets: Optional[List[Dict[str, Any]]] = None
    by_metadata: Optional[List[Dict[str, Any]]] = None  # with group_by: {value, seconds, cost_micro_usd}
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Limits:
    """``GET /v1/limits`` (the main figures; the rest is in ``raw``)."""

    sandboxes_per_account: Optional[int] = None
    execs_per_sandbox: Optional[int] = None
    processes_per_sandbox: Optional[int] = None
    creates_in_flight_per_account: Optional[int] = None
    execs_in_flight_per_account: Optional[int] = None
    executions_in_flight_per_account: Optional[int] = None
    max_body_bytes: Optional[int] = None
    max_file_bytes: Optional[int] = None
    output_cap_bytes: Optional[int] = None
    timeout_minutes: Dict[str, Any] = field(default_factory=dict)
    sizes: List[Dict[str, Any]] = field(default_factory=list)
    # what a policy may say and what egress costs (docs/network.md)
    network: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Execution:
    """A one-shot execution (``run_code``) and its receipt."""

    id: str = ""
    status: Optional[str] = None  # completed | timed_out
    exit_code: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: Optional[int] = None
    runner: Optional[str] = None
    startup_path: Optional[str] = None
    prestarted: Optional[bool] = None
    metadata: Dict[str, str] = field(default_factory=dict)
    receipt: Optional[ReceiptRef] = None
    billing: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.receipt, dict):
            self.receipt = from_json(ReceiptRef, self.receipt)


@dataclass
class ApiKey:
    """An API key; ``secret`` only in the reply of its creation."""

    id: str = ""
    prefix: Optional[str] = None
    created_at: Optional[str] = None
    scopes: List[str] = field(default_factory=list)
    secret: Optional[str] = None
    revoked: Optional[bool] = None
    revoked_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Preview:
    """A preview URL of a sandbox's port for browsers (docs/api.md
    "Previews"); ``url`` (which holds the token) only in the reply of its
    creation."""

    id: str = ""
    sandbox_id: str = ""
    port: int = 0
    url: Optional[str] = None
    created_at: Optional[str] = None
    expires_at: Optional[str] = None
    revoked: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Snapshot:
    """A snapshot of a sandbox's disk (docs/api.md "Snapshots"): a
    sandbox created with ``snapshot=`` starts from it."""

    id: str = ""
    name: str = ""
    sandbox_id: str = ""
    disk_gib: int = 0
    bytes: int = 0
    created_at: Optional[str] = None
    cost_micro_usd: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class ReceiptKey:
    """``GET /v1/receipts/public-key``: pin it once, verify offline after."""

    algorithm: str = ""
    signer: str = ""
    public_key_pem: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)
