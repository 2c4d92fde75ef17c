"""The official A2UI Python SDKs (a2ui-core 0.4.0, a2ui-agent-sdk 0.9.0) against aml-a2ui.

Subcommands:

  schemas DIR          write the v1.0 schemas a2ui-core generates (fixtures/a2ui-v1.0-current)
  check-schemas DIR    exit 1 unless DIR holds exactly what the installed a2ui-core generates
  agent --capabilities FILE --report FILE
                       play a host's agent over stdin/stdout, one JSON line each way: build
                       calls with the SDKs, send each, read the gate's answer, and check it
                       with a2ui-core's models and against its RpcHandler given the same
                       call; write every check to the report file

Run by aml-a2ui/tests/it/interop_sdk.rs with the venv that scripts/interop-setup creates.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

from pydantic import TypeAdapter

from a2ui.core import (
    Catalog,
    RpcErrorCode,
    RpcHandler,
    get_agent_to_renderer_schema_json,
    get_common_types_schema_json,
)
from a2ui.core.catalog.functions import create_function_implementation
from a2ui.core.resolution.data_context import DataContext
from a2ui.core.schema import ProtocolVersion
from a2ui.core.schema.v1_0 import (
    A2uiRendererCapabilities,
    A2uiRendererErrorMessage,
    CallRendererFunction,
    CallRendererFunctionMessage,
    FunctionCall,
    RendererFunctionResponseMessage,
    RendererToAgentMessage,
)
from a2ui.core.state.surface_model import SurfaceModel
from a2ui.inference_formats.express.format import ExpressFormatFactory
from a2ui.parser.messages import (
    normalize_prompt_example_messages,
    to_message_dicts,
    to_message_models,
)
from a2ui.parser.response_part import A2uiPart
from a2ui.processor.processor import A2uiRequestProcessor

SCHEMAS = {
    "common_types.json": get_common_types_schema_json,
    "agent_to_renderer.json": get_agent_to_renderer_schema_json,
}

TEAM = "team@example.test"
FIXTURE_RESULT = {"ok": True}
RENDERER_TO_AGENT = TypeAdapter(RendererToAgentMessage)
SDK_CODES = {c.value for c in RpcErrorCode}
# Codes the gate uses where the SDK has none: a host policy or approval refusal.
GATE_ONLY_CODES = {"ACTION_BLOCKED"}


def write_schemas(out: Path) -> None:
    (out / "json").mkdir(parents=True, exist_ok=True)
    for name, generate in SCHEMAS.items():
        (out / "json" / name).write_text(generate(ProtocolVersion.V1_0))


def check_schemas(vendored: Path) -> int:
    differ = [
        name
        for name, generate in SCHEMAS.items()
        if (vendored / "json" / name).read_text() != generate(ProtocolVersion.V1_0)
    ]
    print(json.dumps({"checked": sorted(SCHEMAS), "differ": differ}))
    return 1 if differ else 0


class Gate:
    """The gate at the other end of stdin/stdout: one line out, one line back."""

    def __init__(self) -> None:
        self.sent = 0

    def send_raw(self, line: bytes) -> dict[str, Any]:
        sys.stdout.buffer.write(line + b"\n")
        sys.stdout.buffer.flush()
        self.sent += 1
        answer = sys.stdin.buffer.readline()
        if not answer:
            raise RuntimeError(f"the gate closed the pipe after {self.sent} messages")
        return json.loads(answer)

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.send_raw(json.dumps(message).encode())


def reference_handler(catalog: Any) -> RpcHandler:
    """a2ui-core's renderer-side RpcHandler over the same catalog, each function a fixture."""
    impls = [
        create_function_implementation(f, lambda args: dict(FIXTURE_RESULT))
        for f in catalog.functions.values()
    ]
    return RpcHandler([catalog.copy_with(functions=impls)])


class Agent:
    def __init__(self, capabilities: dict[str, Any]) -> None:
        caps = A2uiRendererCapabilities.model_validate(capabilities)
        inline = capabilities["v1.0"]["inlineCatalogs"]
        self.catalog = Catalog.from_json(inline[0])
        self.catalog_id = caps.v1_0.supported_catalog_ids[0]
        self.reference = reference_handler(self.catalog)
        self.surface = SurfaceModel(
            surface_id="main",
            default_catalog=self.catalog,
            available_catalogs={self.catalog_id: self.catalog},
        )
        self.gate = Gate()
        self.checks: list[dict[str, Any]] = []

    def reference_answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """What a2ui-core's RpcHandler answers to the same message, if it can read it."""
        try:
            model = CallRendererFunctionMessage.model_validate(message)
        except Exception:
            return None
        context = None
        if model.call_renderer_function.surface_id == "main":
            context = DataContext(surface=self.surface, path="/")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.reference.handle_call_renderer_function(model, context=context)

    def check(
        self,
        name: str,
        message: dict[str, Any] | None,
        expect: Callable[[dict[str, Any]], bool],
        raw: bytes | None = None,
    ) -> dict[str, Any]:
        answer = self.gate.send_raw(raw) if raw is not None else self.gate.send(message)
        problems = []
        shape, model = "unknown", None
        if "rendererFunctionResponse" in answer:
            shape = "error" if "error" in answer["rendererFunctionResponse"] else "value"
            model = RendererFunctionResponseMessage
        elif "error" in answer:
            shape, model = "top_level_error", A2uiRendererErrorMessage
        for validator in (RENDERER_TO_AGENT.validate_python, getattr(model, "model_validate", None)):
            try:
                if validator is None:
                    raise ValueError("neither rendererFunctionResponse nor error")
                validator(answer)
            except Exception as e:
                problems.append(f"a2ui-core's models refuse the answer: {e}")
        code = (answer.get("rendererFunctionResponse") or answer).get("error", {}).get("code")
        reference = self.reference_answer(message) if message is not None else None
        if reference is not None:
            problems += compare_with_reference(message, answer, reference)
        if not expect(answer):
            problems.append("unexpected answer")
        entry = {
            "name": name,
            "shape": shape,
            "code": code,
            "answer": answer,
            "reference": reference,
            "problems": problems,
        }
        self.checks.append(entry)
        return entry

    def call(self, call_id: str, function: str, args: Any = None, **extra: Any) -> dict[str, Any]:
        """A current-form call as a dict, the way an agent that writes JSON would."""
        call_function: dict[str, Any] = {"@call": function, "catalogId": extra.get("catalog", self.catalog_id)}
        if args is not None:
            call_function["args"] = args
        body: dict[str, Any] = {"functionCallId": call_id, "callFunction": call_function}
        if "surface" in extra:
            body["surfaceId"] = extra["surface"]
        return {"version": "v1.0", "callRendererFunction": body}


def compare_with_reference(message: dict[str, Any], answer: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    """The gate answers where the reference answers, and refuses whatever the reference refuses."""
    problems = []
    gate_resp = answer.get("rendererFunctionResponse")
    ref_resp = ref.get("rendererFunctionResponse")
    if gate_resp is None or ref_resp is None:
        return [f"not both rendererFunctionResponse: gate {answer}, reference {ref}"]
    if answer.get("version") != ref.get("version"):
        problems.append("versions differ")
    if gate_resp["functionCallId"] != ref_resp["functionCallId"]:
        problems.append("call ids differ")
    gate_code = gate_resp.get("error", {}).get("code")
    ref_code = ref_resp.get("error", {}).get("code")
    if gate_code is not None and gate_code not in SDK_CODES | GATE_ONLY_CODES:
        problems.append(f"gate code {gate_code} is not an a2ui-core RpcErrorCode")
    if ref_code is not None and gate_code is None:
        problems.append(f"the reference refuses ({ref_code}) and the gate does not")
    # The gate refines the reference's INVALID_FUNCTION_CALL for unknown functions.
    if ref_code is not None and gate_code not in (ref_code, "UNKNOWN_FUNCTION"):
        problems.append(f"codes differ: gate {gate_code}, reference {ref_code}")
    if gate_code is None and ref_resp.get("value") != gate_resp.get("value"):
        problems.append(f"values differ: gate {gate_resp.get('value')}, reference {ref_resp.get('value')}")
    return problems


def built_five_ways(agent: Agent) -> None:
    """The same dispatched call, built five ways with the SDKs."""
    args = {"to": TEAM, "body": "Build passed."}
    cid = agent.catalog_id
    model = CallRendererFunctionMessage(
        callRendererFunction=CallRendererFunction(
            functionCallId="sdk_model",
            callFunction=FunctionCall(call="sendMessage", catalogId=cid, args=args),
        )
    )
    ways = {
        "pydantic_models": to_message_dicts(model),
        "to_message_models": to_message_dicts(
            to_message_models(agent.call("sdk_dict", "sendMessage", args))
        ),
        "prompt_example": to_message_dicts(
            normalize_prompt_example_messages(
                {"callFunction": {"@call": "sendMessage", "args": args}, "functionCallId": "sdk_example"},
                version="v1.0",
                default_catalog_id=cid,
            )
        ),
        "direct_json_response": parsed(
            A2uiRequestProcessor([agent.catalog]),
            "Sending it.\n<a2ui-json>\n"
            + json.dumps([agent.call("sdk_direct_json", "sendMessage", args)])
            + "\n</a2ui-json>",
        ),
        "express_response": parsed(
            A2uiRequestProcessor([agent.catalog], format_factory=ExpressFormatFactory()),
            'Sending it.\n<a2ui>\nsendMessage(to="team@example.test", body="Build passed.",'
            ' functionCallId="sdk_express")\n</a2ui>',
        ),
    }
    for way, messages in ways.items():
        assert len(messages) == 1, (way, messages)
        assert "@call" in messages[0]["callRendererFunction"]["callFunction"], messages
        agent.check(f"built_{way}", messages[0], lambda a: a["rendererFunctionResponse"].get("value") == FIXTURE_RESULT)


def parsed(processor: A2uiRequestProcessor, llm_text: str) -> list[dict[str, Any]]:
    parts = processor.parse_response(llm_text)
    return [m for p in parts if isinstance(p, A2uiPart) for m in to_message_dicts(p.a2ui)]


def error_code(code: str) -> Callable[[dict[str, Any]], bool]:
    def expect(answer: dict[str, Any]) -> bool:
        where = answer.get("rendererFunctionResponse") or answer
        return where.get("error", {}).get("code") == code

    return expect


def refusals(agent: Agent) -> None:
    args = {"to": TEAM, "body": "x"}
    with_surface = CallRendererFunctionMessage(
        callRendererFunction=CallRendererFunction(
            surfaceId="main",
            functionCallId="surface_main",
            callFunction=FunctionCall(call="sendMessage", catalogId=agent.catalog_id, args=args),
        )
    )
    agent.check("surface_id", to_message_dicts(with_surface)[0], lambda a: a["rendererFunctionResponse"].get("value") == FIXTURE_RESULT)
    agent.check("replayed_call_id", to_message_dicts(with_surface)[0], error_code("DUPLICATE"))
    agent.check("policy_blocked", agent.call("blocked", "sendMessage", {"to": "boss@example.test", "body": "x"}), error_code("ACTION_BLOCKED"))
    agent.check("unknown_function", agent.call("unknown_fn", "deleteEverything", {}), error_code("UNKNOWN_FUNCTION"))
    agent.check("unknown_catalog", agent.call("unknown_cat", "sendMessage", args, catalog="https://outside.test/c.json"), error_code("UNKNOWN_FUNCTION"))
    agent.check("renderer_only", agent.call("renderer_only", "copyToClipboard", {"text": "x"}), error_code("UNKNOWN_FUNCTION"))
    agent.check("schema_mismatch", agent.call("schema", "sendMessage", {"to": 5, "body": "x"}), error_code("INVALID_FUNCTION_CALL"))
    agent.check("args_missing", agent.call("no_args", "sendMessage"), error_code("INVALID_FUNCTION_CALL"))
    nested = {"to": TEAM, "body": {"@call": "openTicket", "args": {"title": "t"}}}
    agent.check("nested_call", agent.call("nested", "sendMessage", nested), error_code("INVALID_FUNCTION_CALL"))
    binding = parsed(
        A2uiRequestProcessor([agent.catalog], format_factory=ExpressFormatFactory()),
        '<a2ui>\nsendMessage(to=$/user/email, body="x", functionCallId="express_binding")\n</a2ui>',
    )
    assert binding[0]["callRendererFunction"]["callFunction"]["args"]["to"] == {"@path": "/user/email"}, binding
    agent.check("data_binding_from_express", binding[0], error_code("INVALID_FUNCTION_CALL"))
    duplicate_key = (
        b'{"version":"v1.0","callRendererFunction":{"functionCallId":"dup_key","callFunction":'
        b'{"@call":"sendMessage","catalogId":"' + agent.catalog_id.encode()
        + b'","args":{"to":"team@example.test","to":"x@example.test","body":"x"}}}}'
    )
    agent.check("duplicate_key", None, error_code("INVALID_FUNCTION_CALL"), raw=duplicate_key)
    candidate = {
        "version": "v1.0",
        "callRendererFunction": {
            "functionCallId": "candidate_form",
            "callFunction": {"call": "copyToClipboard", "catalogId": agent.catalog_id, "args": {"text": "x"}},
        },
    }
    entry = agent.check("candidate_form_refused", None, error_code("INVALID_FUNCTION_CALL"), raw=json.dumps(candidate).encode())
    assert entry["shape"] == "top_level_error", entry
    agent.check("not_json", None, error_code("INVALID_FUNCTION_CALL"), raw=b"not json")
    agent.check("message_too_large", None, error_code("MESSAGE_TOO_LARGE"), raw=b'{"pad":"' + b"x" * (3 << 20) + b'"}')
    long_id = agent.call("i" * 10_000, "sendMessage", args)
    agent.check("call_id_too_long", None, error_code("CALL_ID_TOO_LONG"), raw=json.dumps(long_id).encode())


def run_agent(capabilities_path: Path, report_path: Path) -> int:
    agent = Agent(json.loads(capabilities_path.read_text()))
    built_five_ways(agent)
    refusals(agent)
    failed = [c["name"] for c in agent.checks if c["problems"]]
    report_path.write_text(
        json.dumps(
            {
                "sdk": {"a2ui-core": "0.4.0", "a2ui-agent-sdk": "0.9.0"},
                "sent": agent.gate.sent,
                "checks": agent.checks,
                "failed": failed,
            },
            indent=1,
        )
    )
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "schemas":
        write_schemas(Path(argv[1]))
        return 0
    if len(argv) == 2 and argv[0] == "check-schemas":
        return check_schemas(Path(argv[1]))
    if len(argv) == 5 and argv[0] == "agent" and argv[1] == "--capabilities" and argv[3] == "--report":
        return run_agent(Path(argv[2]), Path(argv[4]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
