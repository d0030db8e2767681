"""A counting reverse proxy in front of moto: every AWS request, by service and operation.

The agent runs in other processes, so requests are counted at the emulator's door: clients are
pointed at the proxy (127.0.0.1 only), which forwards each request unchanged to moto and
records what it was:

- the service, from the SigV4 credential scope of the `Authorization` header;
- the operation, from `X-Amz-Target` (JSON protocols: DynamoDB, SQS, EventBridge, SSM), the
  `Action` form field (query protocols: EC2, SNS), or the method and path of S3 requests;
- the request and response bodies' sizes, the DynamoDB item sizes (for request units), and
  the `kind` of agent messages sent to SQS.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade"}
)


@dataclass(frozen=True)
class Request:
    """One request that went through the proxy."""

    service: str
    operation: str
    status: int
    seconds: float
    request_bytes: int
    response_bytes: int
    detail: dict[str, Any] = field(default_factory=dict)


def s3_operation(method: str, path: str, query: str, headers: dict[str, str]) -> str:
    """The S3 operation of a REST request (path-style addressing, as boto3 uses with moto)."""
    q = parse_qs(query, keep_blank_values=True)
    parts = [p for p in path.split("/") if p]
    has_key = len(parts) > 1
    if method == "GET":
        if not has_key:
            if "versioning" in q:
                return "GetBucketVersioning"
            return "ListObjectsV2" if q.get("list-type") == ["2"] else "ListObjects"
        return "GetObject"
    if method == "HEAD":
        return "HeadObject" if has_key else "HeadBucket"
    if method == "PUT":
        if not has_key:
            return "PutBucketVersioning" if "versioning" in q else "CreateBucket"
        if "partNumber" in q:
            return "UploadPart"
        if "x-amz-copy-source" in headers:
            return "CopyObject"
        return "PutObject"
    if method == "POST":
        if "uploads" in q:
            return "CreateMultipartUpload"
        if "uploadId" in q:
            return "CompleteMultipartUpload"
        if "delete" in q:
            return "DeleteObjects"
        return "PostObject"
    if method == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in q else "DeleteObject"
    return method


def _service(headers: dict[str, str]) -> str:
    auth = headers.get("authorization", "")
    marker = "Credential="
    if marker in auth:
        scope = auth.split(marker, 1)[1].split(",", 1)[0].split("/")
        if len(scope) >= 4:
            return scope[3]
    return "unknown"


def dynamodb_item_bytes(item: dict[str, Any]) -> int:
    """DynamoDB's size of an item: attribute names plus values (strings, numbers, nested)."""

    def value_size(v: dict[str, Any]) -> int:
        (kind, raw), *_ = v.items()
        if kind in ("S", "B"):
            return len(str(raw).encode())
        if kind == "N":
            return len(str(raw).lstrip("-").replace(".", "")) // 2 + 1
        if kind in ("BOOL", "NULL"):
            return 1
        if kind == "M":
            return 3 + sum(len(k.encode()) + value_size(x) for k, x in raw.items())
        if kind == "L":
            return 3 + sum(1 + value_size(x) for x in raw)
        if kind in ("SS", "BS", "NS"):
            return sum(len(str(x).encode()) for x in raw)
        return 0

    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def classify(
    method: str, path: str, headers: dict[str, str], body: bytes, response: bytes
) -> tuple[str, str, dict[str, Any]]:
    """(service, operation, detail) of one request."""
    service = _service(headers)
    split = urlsplit(path)
    detail: dict[str, Any] = {}
    target = headers.get("x-amz-target", "")
    if target:
        operation = target.rsplit(".", 1)[-1]
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            req = {}
        if service == "dynamodb":
            key = req.get("Item") or req.get("Key") or {}
            detail["pk"] = str(key.get("pk", {}).get("S", ""))
            if operation == "Query":
                values = req.get("ExpressionAttributeValues", {})
                detail["pk"] = str(values.get(":pk", {}).get("S", ""))
            if operation == "TransactWriteItems":
                puts = [i.get("Put", {}).get("Item", {}) for i in req.get("TransactItems", [])]
                detail["items"] = len(puts)
                detail["item_bytes"] = sum(dynamodb_item_bytes(i) for i in puts)
                detail["pk"] = str(puts[0].get("pk", {}).get("S", "")) if puts else ""
            if operation == "PutItem":
                detail["item_bytes"] = dynamodb_item_bytes(req.get("Item", {}))
                detail["live"] = "live" in req.get("Item", {})
                detail["conditional_update"] = ":v" in json.dumps(
                    req.get("ExpressionAttributeValues", {})
                )
            elif operation in ("GetItem", "Query", "Scan"):
                try:
                    resp = json.loads(response or b"{}")
                except ValueError:
                    resp = {}
                items = [resp["Item"]] if "Item" in resp else resp.get("Items", [])
                detail["item_bytes"] = sum(dynamodb_item_bytes(i) for i in items)
                detail["consistent"] = bool(req.get("ConsistentRead"))
        elif service == "ssm" and operation == "GetParameter":
            # A SecureString read with decryption is one KMS Decrypt (SSM calls KMS for it).
            try:
                resp = json.loads(response or b"{}")
            except ValueError:
                resp = {}
            detail["kms_decrypt"] = bool(req.get("WithDecryption")) and (
                resp.get("Parameter", {}).get("Type") == "SecureString"
            )
        elif service == "sqs" and operation == "SendMessage":
            text = req.get("MessageBody", "")
            detail["message_bytes"] = len(text.encode())
            detail["queue"] = str(req.get("QueueUrl", "")).rsplit("/", 1)[-1]
            try:
                detail["kind"] = json.loads(text).get("body", {}).get("kind")
            except (ValueError, AttributeError):
                detail["kind"] = None
        return service, operation, detail
    if service == "s3":
        operation = s3_operation(method, split.path, split.query, headers)
        detail["key"] = "/".join(split.path.split("/")[2:])
        prefix = parse_qs(split.query).get("prefix")
        if prefix:
            detail["prefix"] = prefix[0]
        return service, operation, detail
    form = parse_qs(body.decode(errors="replace")) if body else {}
    action = form.get("Action") or parse_qs(split.query).get("Action")
    return service, (action[0] if action else method), detail


class CountingProxy:
    """Forwards HTTP to `upstream` and records every request; binds 127.0.0.1 only."""

    def __init__(self, upstream: str, *, name: str = "proxy") -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.name = name
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            break
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    return b"".join(chunks)
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _forward(self) -> None:
                body = self._body()
                started = time.monotonic()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    headers["Content-Length"] = str(len(body))
                status, reply_headers, reply = proxy._send(self.command, self.path, headers, body)
                seconds = time.monotonic() - started
                # Record before replying: once the client has its answer, the count includes it.
                lower = {k.lower(): v for k, v in self.headers.items()}
                service, operation, detail = classify(self.command, self.path, lower, body, reply)
                proxy._record(
                    Request(service, operation, status, seconds, len(body), len(reply), detail)
                )
                self.send_response_only(status)
                for k, v in reply_headers:
                    if k.lower() in HOP_BY_HOP or k.lower() == "content-length":
                        continue
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(reply)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _forward  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"{name}-serve", daemon=True
        )

    @property
    def url(self) -> str:
        """Where clients should send their requests."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> CountingProxy:
        """Start serving."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
            self._local.conn = conn
        return conn

    def _send(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        for attempt in range(2):
            conn = self._connection()
            try:
                conn.request(method, path, body=body or None, headers=headers)
                response = conn.getresponse()
                return response.status, response.getheaders(), response.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def reset(self) -> None:
        """Forget what was counted so far."""
        with self._lock:
            self.requests.clear()

    def counts(self) -> Counter[tuple[str, str]]:
        """Requests per (service, operation)."""
        with self._lock:
            return Counter((r.service, r.operation) for r in self.requests)

    def snapshot(self) -> list[Request]:
        """Every request so far."""
        with self._lock:
            return list(self.requests)
