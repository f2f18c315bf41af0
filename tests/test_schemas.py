"""The msgspec schemas of the three protocols, against the recorded corpus and the openai SDK.

Pure msgspec: no framing, no backend. The openai SDK (a test dependency) is the reference for the
event types that must exist and for the values decoded from each recorded event.
"""

from __future__ import annotations

import json
import typing
from typing import Any, Union

import msgspec
import pydantic
import pytest

from rapidsse import chat, realtime, responses
from rapidsse._schema import Tagged, UnknownEvent, UnknownVariant, decode_lenient

from .conftest import corpus_files

# ---------------------------------------------------------------------------------------------------
# Helpers


def sse_payloads(raw: bytes) -> list[bytes]:
    """The data of each event of an SSE recording (a stand-in for the real framer: the recordings
    are plain, with LF or CRLF line ends, so blank lines split events)."""
    payloads = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
        if data:
            payloads.append(b"\n".join(data))
    return payloads


def corpus_payloads(kind: str) -> list[tuple[str, list[bytes]]]:
    out = []
    for path in corpus_files(kind):
        raw = path.read_bytes()
        if kind == "realtime":
            payloads = [line for line in raw.splitlines() if line.strip()]
        else:
            payloads = [p for p in sse_payloads(raw) if p != b"[DONE]"]
        assert payloads, path
        out.append((path.name, payloads))
    return out


RESPONSES = corpus_payloads("responses")
CHAT = corpus_payloads("chat")
REALTIME = corpus_payloads("realtime")


def by_name(files):
    return pytest.mark.parametrize("name, payloads", files, ids=[name for name, _ in files])


def union_members(union: Any) -> tuple[type, ...]:
    if typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    return typing.get_args(union)


def sdk_tags(union: Any) -> set[str]:
    tags = set()
    for model in union_members(union):
        tags.update(typing.get_args(model.model_fields["type"].annotation))
    return tags


def unknown_variants(obj: Any, path: str = "$") -> list[str]:
    """Where ``obj`` holds an ``UnknownVariant`` (as ``path: original type``)."""
    if isinstance(obj, UnknownVariant):
        return [f"{path}: {obj.type}"]
    if isinstance(obj, msgspec.Struct):
        found = []
        for name in obj.__struct_fields__:
            found += unknown_variants(getattr(obj, name), f"{path}.{name}")
        return found
    if isinstance(obj, list):
        return [hit for i, x in enumerate(obj) for hit in unknown_variants(x, f"{path}[{i}]")]
    return []


_MISSING = object()


def _sdk_get(theirs: Any, name: str) -> Any:
    if isinstance(theirs, dict):
        return theirs.get(name, _MISSING)
    if isinstance(theirs, pydantic.BaseModel):  # only what the payload had, not the SDK's defaults
        if name in theirs.model_fields_set or name in (theirs.model_extra or {}):
            return getattr(theirs, name)
    return _MISSING


def assert_matches_sdk(mine: Any, theirs: Any, path: str = "$") -> int:
    """Compare what rapidsse decoded with what the SDK parsed, field by field, recursively.

    Returns how many scalar values were compared. Fields the SDK does not have are skipped.
    """
    if isinstance(mine, msgspec.Struct):
        compared = 0
        if isinstance(mine, Tagged):
            assert mine.type == _sdk_get(theirs, "type"), path
            compared += 1
        for name in mine.__struct_fields__:
            value = _sdk_get(theirs, name)
            if value is not _MISSING:
                compared += assert_matches_sdk(getattr(mine, name), value, f"{path}.{name}")
        return compared
    if isinstance(mine, list):
        assert isinstance(theirs, list) and len(mine) == len(theirs), path
        return sum(assert_matches_sdk(a, b, f"{path}[{i}]") for i, (a, b) in enumerate(zip(mine, theirs)))
    if isinstance(mine, dict):
        if isinstance(theirs, pydantic.BaseModel):
            theirs = theirs.model_dump(by_alias=True, exclude_unset=True)
        assert mine == theirs, path
        return 1
    assert mine == theirs and type(mine) in (type(theirs), int, float), (path, mine, theirs)
    return 1


# ---------------------------------------------------------------------------------------------------
# Event types: every type the SDK knows, one Struct per tag


def test_responses_event_types_cover_the_sdk():
    from openai.types.responses import ResponseStreamEvent

    sdk = sdk_tags(ResponseStreamEvent)
    assert len(sdk) >= 59
    assert sdk <= set(responses.EVENT_TYPES), sorted(sdk - set(responses.EVENT_TYPES))
    vendor = {"keepalive", "response.rate_limits.updated", "response.reasoning_part.added", "response.reasoning_part.done"}
    assert vendor <= set(responses.EVENT_TYPES)


def test_realtime_event_types_cover_the_sdk():
    import openai.types.beta.realtime as beta
    import openai.types.realtime as ga

    sdk = sdk_tags(ga.RealtimeServerEvent) | sdk_tags(beta.RealtimeServerEvent)
    assert {"response.output_text.delta", "response.text.delta", "response.audio.delta"} <= sdk
    assert sdk <= set(realtime.EVENT_TYPES), sorted(sdk - set(realtime.EVENT_TYPES))
    translation = sdk_tags(ga.RealtimeTranslationServerEvent)
    assert translation <= set(realtime.EVENT_TYPES), sorted(translation - set(realtime.EVENT_TYPES))
    vendor = {
        "response.render.started",
        "response.render.stopped",
        "input_audio.speech_started",
        "input_audio.speech_stopped",
        "session.closed",
        "ping",
        "conversation.item.input_audio_transcription.updated",
    }
    assert vendor <= set(realtime.EVENT_TYPES)


@pytest.mark.parametrize("module", [responses, realtime], ids=["responses", "realtime"])
def test_event_types_match_the_union(module):
    members = union_members(module.Event)
    assert len(members) == len(module.EVENT_TYPES) == len(set(members))
    for tag, cls in module.EVENT_TYPES.items():
        assert cls in members
        assert cls.__struct_config__.tag == tag
        assert cls.__doc__ and cls.__doc__.strip(), cls
    assert set(module.__all__) >= {"Event", "EVENT_TYPES"} | {cls.__name__ for cls in members}
    assert all(hasattr(module, name) for name in module.__all__)


def test_chat_is_untagged():
    assert chat.Event is chat.ChatCompletionChunk
    assert chat.EVENT_TYPES == {}
    assert all(hasattr(chat, name) for name in chat.__all__)


@pytest.mark.parametrize("module", [responses, realtime, chat], ids=["responses", "realtime", "chat"])
def test_decoders_construct(module):
    msgspec.json.Decoder(list[module.Event])
    msgspec.json.Decoder(module.Event)
    for cls in module.EVENT_TYPES.values():
        msgspec.json.Decoder(cls)


# ---------------------------------------------------------------------------------------------------
# The recorded corpus


def decode_all(payloads: list[bytes], event_type: Any) -> list[Any]:
    events = [msgspec.json.decode(p, type=event_type) for p in payloads]
    assert msgspec.json.Decoder(list[event_type]).decode(b"[" + b",".join(payloads) + b"]") == events
    return events


def decode_tagged(payloads: list[bytes], event_type: Any) -> list[Any]:
    """The events of a recording of a tagged protocol, each one of the type it names, with no
    unknown variant inside, decoded alike by ``decode_lenient`` and unchanged by a round trip."""
    events = decode_all(payloads, event_type)
    for payload, event in zip(payloads, events):
        assert event.type == json.loads(payload)["type"]
        assert unknown_variants(event) == []
        assert decode_lenient(payload, event_type) == event
        assert msgspec.json.decode(msgspec.json.encode(event), type=event_type) == event
    return events


@by_name(RESPONSES)
def test_responses_corpus_decodes(name, payloads):
    events = decode_tagged(payloads, responses.Event)
    for event in events:
        if isinstance(event, (responses.ResponseCreated, responses.ResponseCompleted)):
            snapshot = msgspec.json.encode(event.response)
            assert msgspec.json.decode(snapshot, type=responses.Response) == event.response
    assert isinstance(events[0], (responses.ResponseCreated, responses.ResponseQueued))


@by_name(CHAT)
def test_chat_corpus_decodes(name, payloads):
    events = decode_all(payloads, chat.Event)
    for event in events:
        assert isinstance(event, chat.ChatCompletionChunk)
        assert msgspec.json.decode(msgspec.json.encode(event), type=chat.Event) == event
    assert any(e.choices for e in events)


@by_name(REALTIME)
def test_realtime_corpus_decodes(name, payloads):
    decode_tagged(payloads, realtime.Event)


def sdk_comparison(files, parse, event_type) -> tuple[int, int]:
    """Compare every payload the SDK accepts; return (payloads compared, payloads in all)."""
    compared = total = 0
    for _, payloads in files:
        for payload in payloads:
            total += 1
            parsed = parse(payload)
            if parsed is None:
                continue
            payload, theirs = parsed
            mine = msgspec.json.decode(payload, type=event_type)
            assert assert_matches_sdk(mine, theirs) > 1, payload[:200]
            compared += 1
    return compared, total


def _sdk_parser(*unions, fixup=None):
    """``parse(payload)``: ``(payload, SDK object)``, or None if the SDK rejects the payload
    (vendor events, omitted fields). ``fixup`` may amend a rejected payload for another try; the
    comparison then decodes the amended payload on both sides."""
    adapters = [pydantic.TypeAdapter(u) for u in unions]

    def parse(payload):
        candidates = [payload] if fixup is None else [payload, fixup(payload)]
        for candidate in candidates:
            for adapter in adapters:
                try:
                    return candidate, adapter.validate_json(candidate)
                except pydantic.ValidationError:
                    pass
        return None

    return parse


def _with_cache_write_tokens(payload: bytes) -> bytes:
    """The installed SDK requires ``usage.input_tokens_details.cache_write_tokens``, which the
    recordings predate: fill it in."""
    event = json.loads(payload)
    details = ((event.get("response") or {}).get("usage") or {}).get("input_tokens_details")
    if details is not None:
        details.setdefault("cache_write_tokens", 0)
    return json.dumps(event).encode()


def test_responses_values_match_the_sdk():
    from openai.types.responses import ResponseStreamEvent

    parse = _sdk_parser(ResponseStreamEvent, fixup=_with_cache_write_tokens)
    compared, total = sdk_comparison(RESPONSES, parse, responses.Event)
    assert compared >= 0.98 * total, (compared, total)


def test_chat_values_match_the_sdk():
    from openai.types.chat import ChatCompletionChunk

    compared, total = sdk_comparison(CHAT, _sdk_parser(ChatCompletionChunk), chat.Event)
    assert compared >= 0.95 * total, (compared, total)


def test_realtime_values_match_the_sdk():
    import openai.types.beta.realtime as beta
    import openai.types.realtime as ga

    parse = _sdk_parser(ga.RealtimeServerEvent, beta.RealtimeServerEvent)
    compared, total = sdk_comparison(REALTIME, parse, realtime.Event)
    assert compared >= 0.85 * total, (compared, total)


def test_lifecycle_values_match_the_sdk():
    """The response object of the final events, in detail: id, status, usage, output items."""
    from openai.types.responses import ResponseStreamEvent

    parse = _sdk_parser(ResponseStreamEvent, fixup=_with_cache_write_tokens)
    finals = 0
    for _, payloads in RESPONSES:
        for payload in payloads:
            if not isinstance(msgspec.json.decode(payload, type=responses.Event), responses.ResponseCompleted):
                continue
            parsed = parse(payload)
            if parsed is None:  # a vendor's response the SDK rejects
                continue
            mine = msgspec.json.decode(parsed[0], type=responses.Event).response
            theirs = parsed[1].response
            assert mine.id == theirs.id
            assert mine.status == theirs.status == "completed"
            assert mine.model == theirs.model and mine.created_at == theirs.created_at
            assert mine.usage.total_tokens == theirs.usage.total_tokens > 0
            assert mine.usage.input_tokens_details.cached_tokens == theirs.usage.input_tokens_details.cached_tokens
            assert mine.usage.output_tokens_details.reasoning_tokens == (
                theirs.usage.output_tokens_details.reasoning_tokens
            )
            assert [i.type for i in mine.output] == [i.type for i in theirs.output]
            assert [getattr(i, "id", None) for i in mine.output] == [getattr(i, "id", None) for i in theirs.output]
            finals += 1
    assert finals >= 20


def test_corpus_covers_the_item_types():
    types = set()
    for _, payloads in RESPONSES:
        for event in decode_all(payloads, responses.Event):
            if isinstance(event, responses.ResponseCompleted):
                types.update(type(item) for item in event.response.output)
    expected = {
        responses.OutputMessage,
        responses.ReasoningItem,
        responses.FunctionCall,
        responses.WebSearchCall,
        responses.CodeInterpreterCall,
        responses.McpCall,
        responses.McpListTools,
        responses.ToolSearchCall,
        responses.ToolSearchOutput,
        responses.Compaction,
    }
    assert expected <= types, expected - types


# ---------------------------------------------------------------------------------------------------
# Responses: synthetic events for what the corpus lacks


def decode_synthetic(event_type: Any, events: tuple[dict, ...]) -> list[Any]:
    """``events`` written as JSON and decoded as ``event_type``, each unchanged by a round trip."""
    payloads = [json.dumps(e).encode() for e in events]
    decoded = decode_all(payloads, event_type)
    for event in decoded:
        assert msgspec.json.decode(msgspec.json.encode(event), type=event_type) == event
    return decoded


def decode_response_events(*events: dict) -> list[Any]:
    return decode_synthetic(responses.Event, events)


def test_refusal_events():
    delta, done, part = decode_response_events(
        {"type": "response.refusal.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0,
         "delta": "I can't", "sequence_number": 5},
        {"type": "response.refusal.done", "item_id": "msg_1", "output_index": 0, "content_index": 0,
         "refusal": "I can't help with that.", "sequence_number": 6},
        {"type": "response.content_part.done", "item_id": "msg_1", "output_index": 0, "content_index": 0,
         "part": {"type": "refusal", "refusal": "I can't help with that."}, "sequence_number": 7},
    )
    assert isinstance(delta, responses.RefusalDelta) and delta.delta == "I can't"
    assert delta.sequence_number == 5 and delta.item_id == "msg_1"
    assert isinstance(done, responses.RefusalDone) and done.refusal == "I can't help with that."
    assert isinstance(part.part, responses.Refusal) and part.part.refusal == "I can't help with that."


def test_audio_events():
    delta, done, tdelta, tdone = decode_response_events(
        {"type": "response.audio.delta", "delta": "UklGRg==", "sequence_number": 1},
        {"type": "response.audio.done", "sequence_number": 2},
        {"type": "response.audio.transcript.delta", "delta": "Hel", "sequence_number": 3},
        {"type": "response.audio.transcript.done", "sequence_number": 4},
    )
    assert isinstance(delta, responses.AudioDelta) and delta.delta == "UklGRg=="
    assert isinstance(done, responses.AudioDone) and done.sequence_number == 2
    assert isinstance(tdelta, responses.AudioTranscriptDelta) and tdelta.delta == "Hel"
    assert isinstance(tdone, responses.AudioTranscriptDone)


def test_image_generation_events():
    partial, item = decode_response_events(
        {"type": "response.image_generation_call.partial_image", "item_id": "ig_1", "output_index": 0,
         "partial_image_b64": "iVBORw0KGgo=", "partial_image_index": 0, "size": "1024x1024",
         "sequence_number": 3},
        {"type": "response.output_item.done", "output_index": 0, "sequence_number": 9,
         "item": {"type": "image_generation_call", "id": "ig_1", "status": "completed",
                  "result": "iVBORw0KGgo=", "revised_prompt": "a cat", "output_format": "png"}},
    )
    assert isinstance(partial, responses.ImageGenerationCallPartialImage)
    assert partial.partial_image_b64 == "iVBORw0KGgo=" and partial.partial_image_index == 0
    assert partial.size == "1024x1024"
    assert isinstance(item.item, responses.ImageGenerationCall)
    assert item.item.result == "iVBORw0KGgo=" and item.item.revised_prompt == "a cat"


def test_shell_call_events():
    events = decode_response_events(
        {"type": "response.output_item.added", "output_index": 0, "sequence_number": 1,
         "item": {"type": "shell_call", "id": "sh_1", "call_id": "call_1", "status": "in_progress",
                  "action": {"commands": [], "timeout_ms": 1000}}},
        {"type": "response.shell_call_command.added", "output_index": 0, "command_index": 0,
         "command": "", "sequence_number": 2},
        {"type": "response.shell_call_command.delta", "output_index": 0, "command_index": 0,
         "delta": "ls -l", "obfuscation": "abc", "sequence_number": 3},
        {"type": "response.shell_call_command.done", "output_index": 0, "command_index": 0,
         "command": "ls -l", "sequence_number": 4},
        {"type": "response.shell_call_output_content.delta", "item_id": "sho_1", "output_index": 1,
         "command_index": 0, "delta": {"stdout": "total 0\n"}, "sequence_number": 5},
        {"type": "response.shell_call_output_content.done", "item_id": "sho_1", "output_index": 1,
         "command_index": 0, "sequence_number": 6,
         "output": [{"stdout": "total 0\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
        {"type": "response.output_item.done", "output_index": 1, "sequence_number": 7,
         "item": {"type": "shell_call_output", "id": "sho_1", "call_id": "call_1", "status": "completed",
                  "output": [{"stdout": "total 0\n", "stderr": "", "outcome": {"type": "timeout"}}]}},
    )
    added, cmd_added, cmd_delta, cmd_done, out_delta, out_done, out_item = events
    assert isinstance(added.item, responses.ShellCall) and added.item.action.timeout_ms == 1000
    assert isinstance(cmd_added, responses.ShellCallCommandAdded) and cmd_added.command == ""
    assert isinstance(cmd_delta, responses.ShellCallCommandDelta)
    assert (cmd_delta.delta, cmd_delta.command_index, cmd_delta.obfuscation) == ("ls -l", 0, "abc")
    assert isinstance(cmd_done, responses.ShellCallCommandDone) and cmd_done.command == "ls -l"
    assert isinstance(out_delta, responses.ShellCallOutputContentDelta)
    assert out_delta.delta.stdout == "total 0\n" and out_delta.delta.stderr is None
    assert isinstance(out_done, responses.ShellCallOutputContentDone)
    assert out_done.output[0].outcome.exit_code == 0
    assert isinstance(out_item.item, responses.ShellCallOutput)
    assert out_item.item.output[0].outcome.type == "timeout"


def test_mcp_failure_events():
    call_failed, list_failed, item = decode_response_events(
        {"type": "response.mcp_call.failed", "item_id": "mcp_1", "output_index": 2, "sequence_number": 8},
        {"type": "response.mcp_list_tools.failed", "item_id": "mcpl_1", "output_index": 0, "sequence_number": 3},
        {"type": "response.output_item.done", "output_index": 2, "sequence_number": 9,
         "item": {"type": "mcp_call", "id": "mcp_1", "server_label": "deepwiki", "name": "ask",
                  "arguments": "{}", "status": "failed",
                  "error": {"type": "mcp_protocol_error", "code": -32600, "message": "bad request"}}},
    )
    assert isinstance(call_failed, responses.McpCallFailed) and call_failed.item_id == "mcp_1"
    assert isinstance(list_failed, responses.McpListToolsFailed) and list_failed.output_index == 0
    assert isinstance(item.item, responses.McpCall) and item.item.error.code == -32600
    # older servers send the error as a string
    old = msgspec.json.decode(b'{"type":"mcp_call","id":"m","error":"boom"}', type=responses.OutputItem)
    assert old.error == "boom"


def part_events(item_id: str, output_index: int, kind: str, deltas: list[str]) -> list[dict]:
    """The events of one content part of type ``kind`` (``output_text``, ``reasoning_text``): it is
    added empty, then a ``response.<kind>.delta`` per piece, its ``.done`` with all the text, and
    the part done."""
    where = {"item_id": item_id, "output_index": output_index, "content_index": 0}
    text = "".join(deltas)
    return [
        {"type": "response.content_part.added", **where, "part": {"type": kind, "text": ""}},
        *({"type": f"response.{kind}.delta", **where, "delta": d} for d in deltas),
        {"type": f"response.{kind}.done", **where, "text": text},
        {"type": "response.content_part.done", **where, "part": {"type": kind, "text": text}},
    ]


def test_friendli_reasoning_text_stream():
    """The 15 core types as the Friendli Container sends them: sequence numbers from 0, no
    annotations on parts, no logprobs on deltas."""
    response = {"id": "resp_1", "object": "response", "created_at": 1, "status": "in_progress",
                "model": "friendli", "output": []}
    done = dict(response, status="completed", usage={"input_tokens": 3, "output_tokens": 5, "total_tokens": 8},
                output=[{"type": "reasoning", "id": "rs_1", "summary": [],
                         "content": [{"type": "reasoning_text", "text": "Think."}]},
                        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": "Hi"}]}])
    stream = [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"type": "reasoning", "id": "rs_1", "summary": []}},
        *part_events("rs_1", 0, "reasoning_text", ["Think", "."]),
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"type": "reasoning", "id": "rs_1", "summary": [],
                  "content": [{"type": "reasoning_text", "text": "Think."}]}},
        {"type": "response.output_item.added", "output_index": 1,
         "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}},
        *part_events("msg_1", 1, "output_text", ["Hi"]),
        {"type": "response.output_item.done", "output_index": 1, "item": done["output"][1]},
        {"type": "response.completed", "response": done},
    ]
    for n, event in enumerate(stream):
        event["sequence_number"] = n
    events = decode_response_events(*stream)
    assert [e.sequence_number for e in events] == list(range(len(stream)))
    reasoning = "".join(e.delta for e in events if isinstance(e, responses.ReasoningTextDelta))
    assert reasoning == "Think."
    part = events[3].part
    assert isinstance(part, responses.ReasoningText)
    text_part = events[10].part
    assert isinstance(text_part, responses.OutputText) and text_part.annotations == []
    assert events[11].logprobs is None
    final = events[-1].response
    assert final.usage.total_tokens == 8
    assert isinstance(final.output[0], responses.ReasoningItem)
    assert final.output[0].content[0].text == "Think."
    assert final.output[1].content[0].text == "Hi"


def test_llama_cpp_style_events_without_indices():
    created, added, delta, done, item_done, completed = decode_response_events(
        {"type": "response.created", "response": {"id": "resp_x", "object": "response", "status": "in_progress"}},
        {"type": "response.output_item.added", "item": {"type": "message", "id": "msg_x", "role": "assistant",
                                                         "content": []}},
        {"type": "response.output_text.delta", "item_id": "msg_x", "delta": "Hello"},
        {"type": "response.function_call_arguments.done", "arguments": "{}"},
        {"type": "response.output_item.done", "item": {"type": "function_call", "call_id": "c1",
                                                        "name": "f", "arguments": "{}"}},
        {"type": "response.completed", "response": {"id": "resp_x", "status": "completed"}},
    )
    assert created.sequence_number is None and created.response.output == []
    assert added.output_index is None and added.item.status is None
    assert (delta.output_index, delta.content_index, delta.sequence_number, delta.logprobs) == (None,) * 4
    assert done.item_id is None and done.arguments == "{}"
    assert item_done.item.id is None and item_done.item.call_id == "c1"
    assert completed.response.usage is None


def test_vendor_events():
    keepalive, limits, part_added, part_done, flat, nested = decode_response_events(
        {"type": "keepalive", "sequence_number": 12},
        {"type": "response.rate_limits.updated", "sequence_number": 40,
         "rate_limits": [{"name": "requests", "limit": 500, "remaining": 499, "reset_seconds": 0.12}]},
        {"type": "response.reasoning_part.added", "item_id": "rs_1", "output_index": 0, "content_index": 0,
         "part": {"type": "reasoning_text", "text": ""}, "sequence_number": 3},
        {"type": "response.reasoning_part.done", "item_id": "rs_1", "output_index": 0, "content_index": 0,
         "part": {"type": "reasoning_text", "text": "hmm"}, "sequence_number": 9},
        {"type": "error", "code": "server_error", "message": "boom", "param": None, "sequence_number": 2},
        {"type": "error", "error": {"type": "invalid_request_error", "code": 400, "message": "bad"}},
    )
    assert isinstance(keepalive, responses.Keepalive) and keepalive.sequence_number == 12
    assert limits.rate_limits[0].remaining == 499 and limits.rate_limits[0].reset_seconds == 0.12
    assert isinstance(part_added, responses.ReasoningPartAdded)
    assert isinstance(part_done.part, responses.ReasoningText) and part_done.part.text == "hmm"
    assert (flat.code, flat.message, flat.error) == ("server_error", "boom", None)
    assert nested.error.code == 400 and nested.error.message == "bad"


def test_annotation_and_logprobs():
    annotation, delta = decode_response_events(
        {"type": "response.output_text.annotation.added", "item_id": "msg_1", "output_index": 0,
         "content_index": 0, "annotation_index": 0, "sequence_number": 4,
         "annotation": {"type": "file_path", "file_id": "cfile_1", "index": 10}},
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0,
         "delta": "Hi", "sequence_number": 5,
         "logprobs": [{"token": "Hi", "logprob": -0.5, "top_logprobs": [{"token": "Hello", "logprob": -1.5}]}]},
    )
    assert isinstance(annotation.annotation, responses.FilePath) and annotation.annotation.index == 10
    assert delta.logprobs[0].top_logprobs[0].token == "Hello"


def test_required_fields():
    for payload in (
        b'{"type":"response.output_text.delta","item_id":"m"}',
        b'{"type":"response.completed"}',
        b'{"type":"response.output_item.added","output_index":0}',
        b'{"type":"response.image_generation_call.partial_image","item_id":"i"}',
    ):
        with pytest.raises(msgspec.ValidationError, match="missing required field"):
            msgspec.json.decode(payload, type=responses.Event)


def test_compact_encoding():
    event = responses.OutputTextDelta("Hi", item_id="msg_1")
    assert msgspec.json.encode(event) == b'{"type":"response.output_text.delta","delta":"Hi","item_id":"msg_1"}'
    assert event.type == "response.output_text.delta"
    assert msgspec.json.encode(responses.OutputText(text="x")) == b'{"type":"output_text","text":"x"}'


# ---------------------------------------------------------------------------------------------------
# Nested unknown types


HOLOGRAM = {"type": "hologram_call", "id": "hc_1", "status": "completed", "frames": [{"n": 1}]}


def completed_with(**response: Any) -> bytes:
    return json.dumps({"type": "response.completed", "sequence_number": 9,
                       "response": {"id": "resp_1", "status": "completed", **response}}).encode()


def test_nested_unknown_output_item():
    payload = completed_with(output=[
        {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "Hi"}]},
        HOLOGRAM,
    ])
    with pytest.raises(msgspec.ValidationError, match=r"hologram_call.*\$\.response\.output\[1\]\.type"):
        msgspec.json.decode(payload, type=responses.Event)
    event = decode_lenient(payload, responses.Event)
    assert isinstance(event, responses.ResponseCompleted) and event.sequence_number == 9
    message, unknown = event.response.output
    assert message.content[0].text == "Hi"
    assert isinstance(unknown, responses.UnknownOutputItem)
    assert unknown.type == "hologram_call" and unknown.data == HOLOGRAM
    assert msgspec.json.decode(msgspec.json.encode(event), type=responses.Event) == event
    assert unknown_variants(event) == ["$.response.output[1]: hologram_call"]


def test_nested_unknown_everywhere():
    """Unknown content part, annotation, tool, web search action and code interpreter output in one
    payload, plus an unknown item inside an output item event."""
    payload = completed_with(
        output=[
            {"type": "message", "id": "m", "content": [
                {"type": "output_audio", "data": "xx"},
                {"type": "output_text", "text": "t", "annotations": [{"type": "page_citation", "page": 3}]},
            ]},
            {"type": "web_search_call", "id": "ws", "action": {"type": "scroll_page", "by": 2}},
            {"type": "code_interpreter_call", "id": "ci", "outputs": [{"type": "files", "files": []}]},
        ],
        tools=[{"type": "function", "name": "f"}, {"type": "teleport", "range": 5},
               {"type": "namespace", "name": "ns", "tools": [{"type": "warp"}]}],
    )
    event = decode_lenient(payload, responses.Event)
    found = unknown_variants(event)
    assert found == [
        "$.response.output[0].content[0]: output_audio",
        "$.response.output[0].content[1].annotations[0]: page_citation",
        "$.response.output[1].action: scroll_page",
        "$.response.output[2].outputs[0]: files",
        "$.response.tools[1]: teleport",
        "$.response.tools[2].tools[0]: warp",
    ]
    assert isinstance(event.response.output[0].content[0], responses.UnknownContentPart)
    assert isinstance(event.response.output[0].content[1].annotations[0], responses.UnknownAnnotation)
    assert isinstance(event.response.tools[1], responses.UnknownTool)
    assert event.response.tools[1].data == {"type": "teleport", "range": 5}

    item_event = json.dumps({"type": "response.output_item.added", "output_index": 0, "item": HOLOGRAM}).encode()
    assert decode_lenient(item_event, responses.Event).item.data == HOLOGRAM
    snapshot = json.dumps({"id": "r", "output": [HOLOGRAM]}).encode()
    assert decode_lenient(snapshot, responses.Response).output[0].type == "hologram_call"


class Cat(Tagged, tag="cat"):
    name: str = ""


class Box(msgspec.Struct):
    """A tagged union without an unknown member (``pets``), after one with (``items``)."""

    pets: list[Union[Cat]]
    items: list[responses.OutputItem] = []


def test_decode_lenient_leaves_other_errors():
    with pytest.raises(msgspec.ValidationError, match=r"at `\$\.type`"):
        decode_lenient(b'{"type":"response.hologram.delta","delta":"x"}', responses.Event)
    with pytest.raises(msgspec.ValidationError, match="Expected `str`"):
        decode_lenient(b'{"type":"response.output_text.delta","delta":5}', responses.Event)
    with pytest.raises(msgspec.DecodeError):
        decode_lenient(b'{"type":', responses.Event)
    # an unknown type nested in a union without an unknown member: the original error
    with pytest.raises(msgspec.ValidationError, match=r"Invalid value 'dog' - at `\$\.pets\[0\]\.type`"):
        decode_lenient(b'{"pets":[{"type":"dog"}]}', Box)
    with pytest.raises(msgspec.ValidationError, match=r"Invalid value 'dog' - at `\$\.pets\[1\]\.type`"):
        decode_lenient(b'{"items":[{"type":"hologram_call"}],"pets":[{"type":"cat"},{"type":"dog"}]}', Box)


def test_decode_lenient_many_unknowns():
    items = [HOLOGRAM, {"type": "message", "content": []}] * 2000 + [{"type": "teleport_call", "id": "t"}]
    event = decode_lenient(completed_with(output=items), responses.Event)
    assert len(event.response.output) == 4001
    assert [item.type for item in event.response.output[:3]] == ["hologram_call", "message", "hologram_call"]
    assert event.response.output[-1].data == {"type": "teleport_call", "id": "t"}
    assert len(unknown_variants(event)) == 2001


def test_unknown_event():
    raw = b'{"type":"response.hologram.delta","delta":"x"}'
    event = UnknownEvent("response.hologram.delta", raw)
    assert (event.type, event.raw) == ("response.hologram.delta", raw)
    assert UnknownEvent(type="t", raw=b"{}") == UnknownEvent("t", b"{}")
    assert UnknownEvent.__doc__


# ---------------------------------------------------------------------------------------------------
# Chat


def chunk(**fields: Any) -> chat.ChatCompletionChunk:
    payload = json.dumps(fields).encode()
    decoded = msgspec.json.decode(payload, type=chat.Event)
    assert msgspec.json.decode(msgspec.json.encode(decoded), type=chat.Event) == decoded
    return decoded


def test_chat_mistral_list_content():
    decoded = chunk(id="c", object="chat.completion.chunk", created=1, model="magistral", choices=[
        {"index": 0, "delta": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": [{"type": "text", "text": "Let me think."}]},
            {"type": "text", "text": "Paris."},
        ]}, "finish_reason": None},
    ])
    thinking, text = decoded.choices[0].delta.content
    assert thinking.type == "thinking" and thinking.thinking[0].text == "Let me think."
    assert text.type == "text" and text.text == "Paris."
    assert chunk(choices=[{"index": 0, "delta": {"content": "plain"}}]).choices[0].delta.content == "plain"


def test_chat_quirks():
    azure = chunk(id="", object="", created=0, model="", choices=[], prompt_filter_results=[{"prompt_index": 0}])
    assert azure.choices == [] and azure.object == ""
    groq = chunk(error={"message": "Tool call validation failed", "type": "invalid_request_error",
                        "code": "tool_use_failed", "failed_generation": "<tool>"})
    assert groq.id is None and groq.choices == [] and groq.error.code == "tool_use_failed"
    usage = chunk(id="c", choices=[], usage={"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
                                             "completion_tokens_details": {"reasoning_tokens": 3}})
    assert usage.usage.completion_tokens_details.reasoning_tokens == 3
    tools = chunk(choices=[{"index": 1, "delta": {"reasoning_content": "hm", "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}},
        {"index": 1, "function": {"arguments": "{\"a\""}},
    ]}, "logprobs": {"content": [{"token": "x", "logprob": -0.1, "bytes": [120], "top_logprobs": []}]}}])
    choice = tools.choices[0]
    assert choice.index == 1 and choice.delta.reasoning_content == "hm"
    assert choice.delta.tool_calls[1].id is None and choice.delta.tool_calls[1].function.arguments == '{"a"'
    assert choice.logprobs.content[0].bytes == [120]


def test_chat_completion_object():
    payload = json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1727346171, "model": "gpt-4o",
        "system_fingerprint": "fp_1", "service_tier": "default",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None, "message": {
            "role": "assistant", "content": None, "refusal": None, "reasoning_content": "r",
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }).encode()
    completion = msgspec.json.decode(payload, type=chat.ChatCompletion)
    call = completion.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == ("call_1", "get_weather", '{"city":"Paris"}')
    assert completion.usage.total_tokens == 15
    assert msgspec.json.decode(msgspec.json.encode(completion), type=chat.ChatCompletion) == completion

    from openai.types.chat import ChatCompletion

    assert assert_matches_sdk(completion, ChatCompletion.model_validate_json(payload)) > 10

    built = chat.ChatCompletion(id="x", choices=[chat.Choice(message=chat.ChatCompletionMessage(content="Hi"))])
    assert msgspec.json.decode(msgspec.json.encode(built), type=chat.ChatCompletion) == built


# ---------------------------------------------------------------------------------------------------
# Realtime: synthetic events


def decode_realtime(*events: dict) -> list[Any]:
    return decode_synthetic(realtime.Event, events)


def response_done(**response: Any) -> dict:
    return {"type": "response.done", "event_id": "ev_9", "response": {
        "id": "resp_1", "object": "realtime.response", "status": "completed", "status_details": None,
        "output": [{"id": "item_1", "object": "realtime.item", "type": "message", "role": "assistant",
                    "status": "completed", "content": [{"type": "output_text", "text": "Hi"}]}],
        **response}}


def test_realtime_max_output_tokens():
    inf, number = decode_realtime(response_done(max_output_tokens="inf"), response_done(max_output_tokens=4096))
    assert inf.response.max_output_tokens == "inf"
    assert number.response.max_output_tokens == 4096
    assert inf.response.output[0].content[0].text == "Hi"
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(json.dumps(response_done(max_output_tokens="lots")).encode(), type=realtime.Event)


def test_realtime_response_statuses():
    cancelled, failed = decode_realtime(
        response_done(status="cancelled", status_details={"type": "cancelled", "reason": "turn_detected"}),
        response_done(status="failed", output=[], status_details={
            "type": "failed", "error": {"type": "server_error", "code": "x", "message": "boom"}},
            usage={"total_tokens": 10, "input_tokens": 7, "output_tokens": 3,
                   "input_token_details": {"cached_tokens": 0, "audio_tokens": 7},
                   "output_token_details": {"text_tokens": 3}}),
    )
    assert cancelled.response.status_details.reason == "turn_detected"
    assert failed.response.status_details.error.message == "boom"
    assert failed.response.usage.input_token_details.audio_tokens == 7


def test_avatar_events():
    events = decode_realtime(
        {"type": "session.created", "event_id": "e1", "session": {"id": "sess_1", "model": "avatar-1"}},
        {"type": "input_audio.speech_started", "event_id": "e2", "audio_start_ms": 120},
        {"type": "input_audio.speech_stopped", "event_id": "e3", "audio_end_ms": 900},
        {"type": "response.created", "event_id": "e4", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.render.started", "event_id": "e5", "response_id": "resp_1"},
        {"type": "response.render.stopped", "event_id": "e6", "response_id": "resp_1"},
        response_done(output=[{"id": "i", "type": "message", "role": "assistant", "status": "completed",
                               "content": [{"type": "text", "text": "Hello!"}]}], max_output_tokens="inf"),
        {"type": "error", "event_id": "e7", "error": {"code": "render_failed", "message": "GPU busy"}},
        {"type": "session.closed", "event_id": "e8", "reason": "idle_timeout"},
    )
    (created, speech_started, speech_stopped, response_created, render_started, render_stopped, done, error,
     closed) = events
    assert created.session.model == "avatar-1"
    assert isinstance(speech_started, realtime.InputAudioSpeechStarted)
    assert isinstance(speech_started, realtime.InputAudioBufferSpeechStarted)
    assert speech_started.audio_start_ms == 120 and speech_stopped.audio_end_ms == 900
    assert isinstance(response_created, realtime.ResponseCreated)
    assert isinstance(render_started, realtime.ResponseRenderStarted) and render_started.response_id == "resp_1"
    assert isinstance(render_stopped, realtime.ResponseRenderStopped)
    assert done.response.output[0].content[0].type == "text"
    assert done.response.output[0].content[0].text == "Hello!"
    assert (error.error.code, error.error.message) == ("render_failed", "GPU busy")
    assert isinstance(closed, realtime.SessionClosed) and closed.reason == "idle_timeout"


def test_realtime_beta_names_subclass_ga():
    ga, beta, audio, transcript = decode_realtime(
        {"type": "response.output_text.delta", "response_id": "r", "item_id": "i", "output_index": 0,
         "content_index": 0, "delta": "a"},
        {"type": "response.text.delta", "response_id": "r", "item_id": "i", "content_index": 0, "delta": "b"},
        {"type": "response.audio.delta", "response_id": "r", "item_id": "i", "delta": "AAAA"},
        {"type": "response.audio_transcript.done", "response_id": "r", "item_id": "i", "transcript": "hey"},
    )
    assert all(isinstance(e, realtime.OutputTextDelta) for e in (ga, beta))
    assert type(beta) is realtime.TextDelta and beta.output_index is None
    assert isinstance(audio, realtime.OutputAudioDelta) and audio.delta == "AAAA"
    assert isinstance(transcript, realtime.OutputAudioTranscriptDone) and transcript.transcript == "hey"


def test_realtime_mcp_and_transcription_events():
    events = decode_realtime(
        {"type": "response.mcp_call_arguments.delta", "event_id": "e", "response_id": "r", "item_id": "m",
         "output_index": 0, "delta": "{", "obfuscation": "zz"},
        {"type": "response.mcp_call.failed", "event_id": "e", "item_id": "m", "output_index": 0},
        {"type": "mcp_list_tools.failed", "event_id": "e", "item_id": "l"},
        {"type": "conversation.item.input_audio_transcription.completed", "event_id": "e", "item_id": "u",
         "content_index": 0, "transcript": "hello", "usage": {"type": "duration", "seconds": 1.5}},
        {"type": "conversation.item.input_audio_transcription.delta", "event_id": "e", "item_id": "u",
         "delta": "hel", "logprobs": [{"token": "hel", "logprob": -0.2, "bytes": [104, 101, 108]}]},
        {"type": "ping", "event_id": "e", "timestamp": 1785214081855},
        {"type": "rate_limits.updated", "event_id": "e",
         "rate_limits": [{"name": "tokens", "limit": 1000, "remaining": 900, "reset_seconds": 5.5}]},
        {"type": "response.output_item.done", "event_id": "e", "response_id": "r", "output_index": 1,
         "item": {"type": "mcp_call", "id": "m", "server_label": "s", "name": "n", "arguments": "{}",
                  "error": {"type": "protocol_error", "code": -1, "message": "no"}}},
    )
    delta, failed, list_failed, completed, tdelta, ping, limits, item = events
    assert delta.delta == "{" and delta.obfuscation == "zz"
    assert isinstance(failed, realtime.McpCallFailed) and isinstance(list_failed, realtime.McpListToolsFailed)
    assert completed.usage.seconds == 1.5 and completed.transcript == "hello"
    assert tdelta.logprobs[0].bytes == [104, 101, 108]
    assert ping.timestamp == 1785214081855
    assert limits.rate_limits[0].reset_seconds == 5.5
    assert item.item.error.message == "no"


def test_realtime_nested_unknown_item():
    payload = json.dumps({"type": "conversation.item.added", "event_id": "e", "previous_item_id": None,
                          "item": {"type": "hologram", "id": "h", "frames": 3}}).encode()
    with pytest.raises(msgspec.ValidationError, match=r"\$\.item\.type"):
        msgspec.json.decode(payload, type=realtime.Event)
    event = decode_lenient(payload, realtime.Event)
    assert isinstance(event.item, realtime.UnknownItem)
    assert event.item.type == "hologram" and event.item.data == {"type": "hologram", "id": "h", "frames": 3}
