"""Lambda Invoke of the functions the agents call directly, answered in this process.

On AWS an agent invokes the `credentials` function (`lambdas/credentials.py`) with the
Lambda API, which the instance role may call on that one function. Here the same request
reaches the emulator (moto), which authenticates it and evaluates the caller's policies
against the function's ARN (`lambda:InvokeFunction`, `install`'s resource namer) exactly as
for any other call, and the invocation itself is handed to the dispatcher, which runs the
handler with its function role's credentials, as the dispatcher does for queue-fed
functions. Other functions' invocations go to moto as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

ACCOUNT = "123456789012"


def _function_name(path: str) -> str:
    """The function name (or ARN's last part) of `/2015-03-31/functions/<name>/invocations`."""
    name = unquote(path.split("?", 1)[0].rstrip("/").rsplit("/", 2)[-2])
    return name.rsplit(":", 1)[-1] if name.startswith("arn:") else name


@contextmanager
def agent_functions(
    functions: Mapping[str, str], invoke: Callable[[str, Any], Any]
) -> Iterator[None]:
    """Answer Invoke of each `functions` name (physical name -> wiring function) by calling
    `invoke(wiring function, event)`, while the context lasts."""
    from moto.awslambda.models import LambdaBackend
    from moto.awslambda.responses import LambdaResponse

    moto_invoke = LambdaBackend.invoke
    moto_resource = LambdaResponse.__dict__.get("_determine_resource")

    def answer(
        self: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response: Any
    ) -> Any:
        name = (
            function_name.rsplit(":", 1)[-1] if function_name.startswith("arn:") else function_name
        )
        wiring = functions.get(name)
        if wiring is None:
            return moto_invoke(self, function_name, qualifier, body, headers, response)
        text = body.decode() if isinstance(body, bytes) else str(body or "{}")
        return json.dumps(invoke(wiring, json.loads(text or "{}"))).encode()

    def resource(self: Any) -> str:
        # What AWS authorizes lambda:InvokeFunction against: the function's ARN.
        return f"arn:aws:lambda:{self.region}:{ACCOUNT}:function:{_function_name(self.path)}"

    LambdaBackend.invoke = answer  # type: ignore[method-assign,assignment]
    LambdaResponse._determine_resource = resource  # type: ignore[attr-defined]
    try:
        yield
    finally:
        LambdaBackend.invoke = moto_invoke  # type: ignore[method-assign]
        if moto_resource is None:
            del LambdaResponse._determine_resource  # type: ignore[attr-defined]
        else:
            LambdaResponse._determine_resource = moto_resource  # type: ignore[attr-defined]
