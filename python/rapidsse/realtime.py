"""Typed server events of the OpenAI Realtime API (one JSON message per WebSocket frame).

Each event type is a Struct tagged on its wire ``type``; :data:`Event` is their union and
:data:`EVENT_TYPES` maps each wire type to its Struct. Both generations of OpenAI's names are
covered: the GA names (``response.output_text.delta``, ``response.output_audio.*``,
``response.output_audio_transcript.*``) and the beta names for the same things
(``response.text.*``, ``response.audio.*``, ``response.audio_transcript.*``). A beta event's Struct
subclasses its GA twin, so ``isinstance(event, OutputTextDelta)`` holds for both.

Also covered: the realtime translation events (``session.*_transcript.delta``, ...), the streaming
avatar service's events (``response.render.started/stopped``, ``input_audio.speech_started/stopped``,
``session.closed``), and vendor extras (xAI's ``ping`` and
``conversation.item.input_audio_transcription.updated``). Vendors omit fields freely (xAI omits ``output_index``; key items by ``item_id``), so
nearly every field is optional. Conversation items of unknown types decode through
:func:`rapidsse._schema.decode_lenient` into :class:`UnknownItem`.

Where the JSON is the same as the Responses API's, the Struct is the same one: ``McpToolInfo``,
``McpApprovalRequest`` and ``McpApprovalResponse`` are those of :mod:`rapidsse.responses`, and
``LogProb`` is ``TopLogprob``. The others only look alike: Realtime's ``McpCall`` has no ``status``
and its ``error`` is an ``McpError`` (a number ``code``), its ``McpListTools`` no ``error``, and
every event carries ``event_id`` where Responses events carry ``sequence_number``.
"""

from __future__ import annotations

from typing import Any, Literal, Union, get_args

from ._schema import Model, RateLimit, Tagged, TopLogprob, UnknownVariant
from .responses import McpApprovalRequest, McpApprovalResponse, McpToolInfo

# ---------------------------------------------------------------------------------------------------
# Conversation items


class ContentPart(Model):
    """A content part of a message item or a ``content_part`` event.

    ``type`` is ``input_text``, ``input_audio``, ``input_image``, ``item_reference`` (user input),
    ``text``/``audio`` (in events and beta items) or ``output_text``/``output_audio`` (GA items).
    """

    type: str | None = None
    text: str | None = None
    audio: str | None = None
    transcript: str | None = None
    id: str | None = None
    image_url: str | None = None
    detail: str | None = None


class Message(Tagged, tag="message"):
    """A message item: a system, user or assistant message and its content parts."""

    id: str | None = None
    object: str | None = None
    status: str | None = None
    role: str | None = None
    content: list[ContentPart] | None = []


class FunctionCall(Tagged, tag="function_call"):
    """A function call item; ``arguments`` is a JSON string."""

    id: str | None = None
    object: str | None = None
    status: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str = ""


class FunctionCallOutput(Tagged, tag="function_call_output"):
    """The output the client gave for a function call."""

    id: str | None = None
    object: str | None = None
    status: str | None = None
    call_id: str | None = None
    output: str | None = None


class McpError(Model):
    """The error of an MCP tool call (``protocol_error``, ``tool_execution_error``, ``http_error``)."""

    type: str | None = None
    code: int | None = None
    message: str | None = None


class McpCall(Tagged, tag="mcp_call"):
    """A call of a tool on a remote MCP server, with its output or error."""

    id: str | None = None
    server_label: str | None = None
    name: str | None = None
    arguments: str = ""
    output: str | None = None
    error: McpError | str | None = None
    approval_request_id: str | None = None


class McpListTools(Tagged, tag="mcp_list_tools"):
    """The tools an MCP server offers."""

    id: str | None = None
    server_label: str | None = None
    tools: list[McpToolInfo] | None = []


class UnknownItem(UnknownVariant, tag="__unknown__"):
    """A conversation item of a type the schemas do not know (see ``UnknownVariant``)."""


ConversationItem = Union[
    Message,
    FunctionCall,
    FunctionCallOutput,
    McpCall,
    McpListTools,
    McpApprovalRequest,
    McpApprovalResponse,
    UnknownItem,
]


# ---------------------------------------------------------------------------------------------------
# Responses, sessions, errors


class CachedTokensDetails(Model):
    """Breakdown of cached input tokens."""

    text_tokens: int | None = None
    audio_tokens: int | None = None
    image_tokens: int | None = None


class InputTokenDetails(Model):
    """Breakdown of input tokens."""

    cached_tokens: int | None = None
    text_tokens: int | None = None
    audio_tokens: int | None = None
    image_tokens: int | None = None
    cached_tokens_details: CachedTokensDetails | None = None


class OutputTokenDetails(Model):
    """Breakdown of output tokens."""

    text_tokens: int | None = None
    audio_tokens: int | None = None
    reasoning_tokens: int | None = None


class Usage(Model):
    """Token usage of a response."""

    total_tokens: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    input_token_details: InputTokenDetails | None = None
    output_token_details: OutputTokenDetails | None = None


class StatusError(Model):
    """The error of a failed response."""

    type: str | None = None
    code: str | None = None
    message: str | None = None


class StatusDetails(Model):
    """Why a response ended as it did (``reason``: ``turn_detected``, ``client_cancelled``,
    ``max_output_tokens``, ``content_filter``; or ``error``)."""

    type: str | None = None
    reason: str | None = None
    error: StatusError | None = None


class Response(Model):
    """A realtime response: status, output items and usage.

    ``status`` is ``in_progress``, ``completed``, ``cancelled``, ``failed`` or ``incomplete``.
    ``max_output_tokens`` is a number or the string ``"inf"``. Some vendors send ``status_details``
    as a plain string (xAI: ``"unimplemented"``).
    """

    id: str | None = None
    object: str | None = None
    status: str | None = None
    status_details: StatusDetails | str | None = None
    output: list[ConversationItem] | None = []
    usage: Usage | None = None
    conversation_id: str | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    metadata: dict[str, Any] | None = None
    output_modalities: list[str] | None = None
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    voice: Any = None
    output_audio_format: Any = None
    temperature: float | None = None


class Session(Model):
    """A realtime (or transcription, or translation) session's configuration.

    Kept loose: its many settings (audio formats, turn detection, tools, ...) differ between API
    generations and vendors, so most are plain JSON values.
    """

    id: str | None = None
    object: str | None = None
    type: str | None = None
    model: str | None = None
    instructions: str | None = None
    output_modalities: list[str] | None = None
    modalities: list[str] | None = None
    voice: Any = None
    audio: Any = None
    input_audio_format: Any = None
    output_audio_format: Any = None
    input_audio_transcription: Any = None
    turn_detection: Any = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    temperature: float | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    max_response_output_tokens: int | Literal["inf"] | None = None
    expires_at: int | None = None
    include: list[str] | None = None
    tracing: Any = None
    truncation: Any = None
    prompt: Any = None


class Conversation(Model):
    """A conversation (``object`` is ``"realtime.conversation"``)."""

    id: str | None = None
    object: str | None = None


class ErrorDetail(Model):
    """What went wrong: ``type``, ``code``, ``message``, and the client event it concerns."""

    type: str | None = None
    code: str | int | None = None
    message: str | None = None
    param: str | None = None
    event_id: str | None = None


LogProb = TopLogprob
"""A transcribed token and its log probability (the same JSON as the other protocols' ``TopLogprob``)."""


class TranscriptionUsage(Model):
    """Usage of an input audio transcription: tokens, or ``duration`` in ``seconds``."""

    type: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    input_token_details: dict[str, Any] | None = None
    seconds: float | None = None


# ---------------------------------------------------------------------------------------------------
# Events: shared fields


class _Event(Tagged, kw_only=True):
    """Fields of every event: the server's ``event_id``."""

    event_id: str | None = None


class _ResponseItemEvent(_Event, kw_only=True):
    """An event about item ``item_id`` of response ``response_id`` at ``output_index``."""

    response_id: str | None = None
    item_id: str | None = None
    output_index: int | None = None


class _ContentEvent(_ResponseItemEvent, kw_only=True):
    """An event about content part ``content_index`` of a response item."""

    content_index: int | None = None


# ---------------------------------------------------------------------------------------------------
# Events: session and conversation


class Error(_Event, tag="error"):
    """An error (of a client event or of the session)."""

    error: ErrorDetail | None = None


class SessionCreated(_Event, tag="session.created"):
    """The session was created (first event of a connection)."""

    session: Session


class SessionUpdated(_Event, tag="session.updated"):
    """The session's configuration changed."""

    session: Session


class TranscriptionSessionUpdated(_Event, tag="transcription_session.updated"):
    """A transcription session's configuration changed (beta)."""

    session: Session


class SessionClosed(_Event, tag="session.closed"):
    """The server closed the session (avatar service, translation sessions)."""

    reason: str | None = None


class ConversationCreated(_Event, tag="conversation.created"):
    """A conversation was created."""

    conversation: Conversation | None = None


class ConversationItemAdded(_Event, tag="conversation.item.added"):
    """An item was added to the conversation (its content may still be streaming)."""

    item: ConversationItem
    previous_item_id: str | None = None


class ConversationItemDone(_Event, tag="conversation.item.done"):
    """A conversation item is complete."""

    item: ConversationItem
    previous_item_id: str | None = None


class ConversationItemCreated(ConversationItemAdded, tag="conversation.item.created"):
    """An item was created in the conversation (beta name of ``conversation.item.added``)."""


class ConversationItemRetrieved(_Event, tag="conversation.item.retrieved"):
    """A conversation item, as the client asked for it."""

    item: ConversationItem


class ConversationItemDeleted(_Event, tag="conversation.item.deleted"):
    """A conversation item was deleted."""

    item_id: str | None = None


class ConversationItemTruncated(_Event, tag="conversation.item.truncated"):
    """An assistant audio item was truncated at ``audio_end_ms``."""

    item_id: str | None = None
    content_index: int | None = None
    audio_end_ms: int | None = None


class InputAudioTranscriptionDelta(_Event, tag="conversation.item.input_audio_transcription.delta"):
    """A piece of the transcript of the user's audio."""

    item_id: str | None = None
    content_index: int | None = None
    delta: str | None = None
    logprobs: list[LogProb] | None = None


class InputAudioTranscriptionCompleted(_Event, tag="conversation.item.input_audio_transcription.completed"):
    """The transcript of the user's audio is complete."""

    item_id: str | None = None
    content_index: int | None = None
    transcript: str | None = None
    usage: TranscriptionUsage | None = None
    logprobs: list[LogProb] | None = None


class InputAudioTranscriptionUpdated(_Event, tag="conversation.item.input_audio_transcription.updated"):
    """The transcript so far of the user's audio (xAI; each event repeats the whole transcript)."""

    item_id: str | None = None
    content_index: int | None = None
    transcript: str | None = None


class InputAudioTranscriptionSegment(_Event, tag="conversation.item.input_audio_transcription.segment"):
    """A transcribed segment of the user's audio, with speaker and times (diarization)."""

    id: str | None = None
    item_id: str | None = None
    content_index: int | None = None
    text: str | None = None
    speaker: str | None = None
    start: float | None = None
    end: float | None = None


class InputAudioTranscriptionFailed(_Event, tag="conversation.item.input_audio_transcription.failed"):
    """Transcribing the user's audio failed."""

    item_id: str | None = None
    content_index: int | None = None
    error: ErrorDetail | None = None


# ---------------------------------------------------------------------------------------------------
# Events: audio buffers


class InputAudioBufferCommitted(_Event, tag="input_audio_buffer.committed"):
    """The input audio buffer was committed as user item ``item_id``."""

    item_id: str | None = None
    previous_item_id: str | None = None


class InputAudioBufferCleared(_Event, tag="input_audio_buffer.cleared"):
    """The input audio buffer was cleared."""


class InputAudioBufferSpeechStarted(_Event, tag="input_audio_buffer.speech_started"):
    """Voice activity detection heard the user start speaking."""

    item_id: str | None = None
    audio_start_ms: int | None = None


class InputAudioBufferSpeechStopped(_Event, tag="input_audio_buffer.speech_stopped"):
    """Voice activity detection heard the user stop speaking."""

    item_id: str | None = None
    audio_end_ms: int | None = None


class InputAudioBufferTimeoutTriggered(_Event, tag="input_audio_buffer.timeout_triggered"):
    """The user was silent longer than the idle timeout."""

    item_id: str | None = None
    audio_start_ms: int | None = None
    audio_end_ms: int | None = None


class InputAudioBufferDtmfEventReceived(_Event, tag="input_audio_buffer.dtmf_event_received"):
    """A DTMF key press was received (SIP calls)."""

    event: str | None = None
    received_at: int | None = None


class InputAudioSpeechStarted(InputAudioBufferSpeechStarted, tag="input_audio.speech_started"):
    """The user started speaking (avatar service's name of ``input_audio_buffer.speech_started``)."""


class InputAudioSpeechStopped(InputAudioBufferSpeechStopped, tag="input_audio.speech_stopped"):
    """The user stopped speaking (avatar service's name of ``input_audio_buffer.speech_stopped``)."""


class OutputAudioBufferStarted(_Event, tag="output_audio_buffer.started"):
    """The server started playing a response's audio (WebRTC)."""

    response_id: str | None = None


class OutputAudioBufferStopped(_Event, tag="output_audio_buffer.stopped"):
    """The server finished playing a response's audio (WebRTC)."""

    response_id: str | None = None


class OutputAudioBufferCleared(_Event, tag="output_audio_buffer.cleared"):
    """The output audio buffer was cleared (WebRTC)."""

    response_id: str | None = None


class RateLimitsUpdated(_Event, tag="rate_limits.updated"):
    """The current rate limits."""

    rate_limits: list[RateLimit] = []


# ---------------------------------------------------------------------------------------------------
# Events: responses


class ResponseCreated(_Event, tag="response.created"):
    """A response started."""

    response: Response


class ResponseDone(_Event, tag="response.done"):
    """A response ended (always its last event); ``response`` holds its status, output and usage.

    xAI also repeats ``response_id`` and ``usage`` at the top level.
    """

    response: Response
    response_id: str | None = None
    usage: Usage | None = None


class ResponseRenderStarted(_Event, tag="response.render.started"):
    """The avatar started rendering a response."""

    response_id: str | None = None
    item_id: str | None = None


class ResponseRenderStopped(_Event, tag="response.render.stopped"):
    """The avatar stopped rendering a response (sent before its ``response.done``)."""

    response_id: str | None = None
    item_id: str | None = None


class OutputItemAdded(_Event, tag="response.output_item.added"):
    """A response added an output item."""

    item: ConversationItem
    response_id: str | None = None
    output_index: int | None = None


class OutputItemDone(_Event, tag="response.output_item.done"):
    """A response's output item is complete."""

    item: ConversationItem
    response_id: str | None = None
    output_index: int | None = None


class ContentPartAdded(_ContentEvent, tag="response.content_part.added"):
    """A new content part (``text`` or ``audio``) started in an output item."""

    part: ContentPart | None = None


class ContentPartDone(_ContentEvent, tag="response.content_part.done"):
    """A content part is complete (xAI sends no ``part`` here)."""

    part: ContentPart | None = None


class OutputTextDelta(_ContentEvent, tag="response.output_text.delta"):
    """A piece of output text."""

    delta: str
    obfuscation: str | None = None


class OutputTextDone(_ContentEvent, tag="response.output_text.done"):
    """An output text part is complete; ``text`` is all of it."""

    text: str | None = None


class TextDelta(OutputTextDelta, tag="response.text.delta"):
    """A piece of output text (beta name of ``response.output_text.delta``)."""


class TextDone(OutputTextDone, tag="response.text.done"):
    """An output text part is complete (beta name of ``response.output_text.done``)."""


class OutputAudioDelta(_ContentEvent, tag="response.output_audio.delta"):
    """A chunk of output audio (base64)."""

    delta: str


class OutputAudioDone(_ContentEvent, tag="response.output_audio.done"):
    """The output audio of a part is complete."""


class AudioDelta(OutputAudioDelta, tag="response.audio.delta"):
    """A chunk of output audio (beta name of ``response.output_audio.delta``)."""


class AudioDone(OutputAudioDone, tag="response.audio.done"):
    """The output audio is complete (beta name of ``response.output_audio.done``)."""


class OutputAudioTranscriptDelta(_ContentEvent, tag="response.output_audio_transcript.delta"):
    """A piece of the transcript of the output audio."""

    delta: str
    obfuscation: str | None = None


class OutputAudioTranscriptDone(_ContentEvent, tag="response.output_audio_transcript.done"):
    """The transcript of the output audio is complete; ``transcript`` is all of it."""

    transcript: str | None = None


class AudioTranscriptDelta(OutputAudioTranscriptDelta, tag="response.audio_transcript.delta"):
    """A piece of the output audio transcript (beta name of ``response.output_audio_transcript.delta``)."""


class AudioTranscriptDone(OutputAudioTranscriptDone, tag="response.audio_transcript.done"):
    """The output audio transcript is complete (beta name of ``response.output_audio_transcript.done``)."""


class FunctionCallArgumentsDelta(_ResponseItemEvent, tag="response.function_call_arguments.delta"):
    """A piece of a function call's JSON arguments."""

    delta: str
    call_id: str | None = None
    obfuscation: str | None = None


class FunctionCallArgumentsDone(_ResponseItemEvent, tag="response.function_call_arguments.done"):
    """A function call's arguments are complete."""

    arguments: str | None = None
    call_id: str | None = None
    name: str | None = None


class McpCallArgumentsDelta(_ResponseItemEvent, tag="response.mcp_call_arguments.delta"):
    """A piece of an MCP tool call's JSON arguments."""

    delta: str
    obfuscation: str | None = None


class McpCallArgumentsDone(_ResponseItemEvent, tag="response.mcp_call_arguments.done"):
    """An MCP tool call's arguments are complete."""

    arguments: str | None = None


class McpCallInProgress(_ResponseItemEvent, tag="response.mcp_call.in_progress"):
    """An MCP tool call started."""


class McpCallCompleted(_ResponseItemEvent, tag="response.mcp_call.completed"):
    """An MCP tool call succeeded."""


class McpCallFailed(_ResponseItemEvent, tag="response.mcp_call.failed"):
    """An MCP tool call failed."""


class McpListToolsInProgress(_Event, tag="mcp_list_tools.in_progress"):
    """Listing an MCP server's tools started."""

    item_id: str | None = None


class McpListToolsCompleted(_Event, tag="mcp_list_tools.completed"):
    """Listing an MCP server's tools succeeded."""

    item_id: str | None = None


class McpListToolsFailed(_Event, tag="mcp_list_tools.failed"):
    """Listing an MCP server's tools failed."""

    item_id: str | None = None


# ---------------------------------------------------------------------------------------------------
# Events: translation sessions and vendor extras


class SessionInputTranscriptDelta(_Event, tag="session.input_transcript.delta"):
    """A piece of the transcript of the input audio (translation sessions)."""

    delta: str
    elapsed_ms: int | None = None


class SessionOutputTranscriptDelta(_Event, tag="session.output_transcript.delta"):
    """A piece of the transcript of the translated audio (translation sessions)."""

    delta: str
    elapsed_ms: int | None = None


class SessionOutputAudioDelta(_Event, tag="session.output_audio.delta"):
    """A chunk of translated audio, base64 (translation sessions)."""

    delta: str
    elapsed_ms: int | None = None
    format: str | None = None
    sample_rate: int | None = None
    channels: int | None = None


class Ping(_Event, tag="ping"):
    """A keep-alive from the server (xAI), with its ``timestamp`` in milliseconds."""

    timestamp: int | float | None = None


Event = Union[
    Error,
    SessionCreated,
    SessionUpdated,
    TranscriptionSessionUpdated,
    SessionClosed,
    ConversationCreated,
    ConversationItemAdded,
    ConversationItemDone,
    ConversationItemCreated,
    ConversationItemRetrieved,
    ConversationItemDeleted,
    ConversationItemTruncated,
    InputAudioTranscriptionDelta,
    InputAudioTranscriptionCompleted,
    InputAudioTranscriptionUpdated,
    InputAudioTranscriptionSegment,
    InputAudioTranscriptionFailed,
    InputAudioBufferCommitted,
    InputAudioBufferCleared,
    InputAudioBufferSpeechStarted,
    InputAudioBufferSpeechStopped,
    InputAudioBufferTimeoutTriggered,
    InputAudioBufferDtmfEventReceived,
    InputAudioSpeechStarted,
    InputAudioSpeechStopped,
    OutputAudioBufferStarted,
    OutputAudioBufferStopped,
    OutputAudioBufferCleared,
    RateLimitsUpdated,
    ResponseCreated,
    ResponseDone,
    ResponseRenderStarted,
    ResponseRenderStopped,
    OutputItemAdded,
    OutputItemDone,
    ContentPartAdded,
    ContentPartDone,
    OutputTextDelta,
    OutputTextDone,
    TextDelta,
    TextDone,
    OutputAudioDelta,
    OutputAudioDone,
    AudioDelta,
    AudioDone,
    OutputAudioTranscriptDelta,
    OutputAudioTranscriptDone,
    AudioTranscriptDelta,
    AudioTranscriptDone,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    McpCallArgumentsDelta,
    McpCallArgumentsDone,
    McpCallInProgress,
    McpCallCompleted,
    McpCallFailed,
    McpListToolsInProgress,
    McpListToolsCompleted,
    McpListToolsFailed,
    SessionInputTranscriptDelta,
    SessionOutputTranscriptDelta,
    SessionOutputAudioDelta,
    Ping,
]
"""Any Realtime API server event (the union to decode messages as)."""

EVENT_TYPES: dict[str, type] = {cls.__struct_config__.tag: cls for cls in get_args(Event)}
"""The Struct of each wire event type."""

__all__ = [
    "Event",
    "EVENT_TYPES",
    "RateLimit",
    "ContentPart",
    "Message",
    "FunctionCall",
    "FunctionCallOutput",
    "McpError",
    "McpCall",
    "McpToolInfo",
    "McpListTools",
    "McpApprovalRequest",
    "McpApprovalResponse",
    "UnknownItem",
    "ConversationItem",
    "CachedTokensDetails",
    "InputTokenDetails",
    "OutputTokenDetails",
    "Usage",
    "StatusError",
    "StatusDetails",
    "Response",
    "Session",
    "Conversation",
    "ErrorDetail",
    "LogProb",
    "TranscriptionUsage",
    "Error",
    "SessionCreated",
    "SessionUpdated",
    "TranscriptionSessionUpdated",
    "SessionClosed",
    "ConversationCreated",
    "ConversationItemAdded",
    "ConversationItemDone",
    "ConversationItemCreated",
    "ConversationItemRetrieved",
    "ConversationItemDeleted",
    "ConversationItemTruncated",
    "InputAudioTranscriptionDelta",
    "InputAudioTranscriptionCompleted",
    "InputAudioTranscriptionUpdated",
    "InputAudioTranscriptionSegment",
    "InputAudioTranscriptionFailed",
    "InputAudioBufferCommitted",
    "InputAudioBufferCleared",
    "InputAudioBufferSpeechStarted",
    "InputAudioBufferSpeechStopped",
    "InputAudioBufferTimeoutTriggered",
    "InputAudioBufferDtmfEventReceived",
    "InputAudioSpeechStarted",
    "InputAudioSpeechStopped",
    "OutputAudioBufferStarted",
    "OutputAudioBufferStopped",
    "OutputAudioBufferCleared",
    "RateLimitsUpdated",
    "ResponseCreated",
    "ResponseDone",
    "ResponseRenderStarted",
    "ResponseRenderStopped",
    "OutputItemAdded",
    "OutputItemDone",
    "ContentPartAdded",
    "ContentPartDone",
    "OutputTextDelta",
    "OutputTextDone",
    "TextDelta",
    "TextDone",
    "OutputAudioDelta",
    "OutputAudioDone",
    "AudioDelta",
    "AudioDone",
    "OutputAudioTranscriptDelta",
    "OutputAudioTranscriptDone",
    "AudioTranscriptDelta",
    "AudioTranscriptDone",
    "FunctionCallArgumentsDelta",
    "FunctionCallArgumentsDone",
    "McpCallArgumentsDelta",
    "McpCallArgumentsDone",
    "McpCallInProgress",
    "McpCallCompleted",
    "McpCallFailed",
    "McpListToolsInProgress",
    "McpListToolsCompleted",
    "McpListToolsFailed",
    "SessionInputTranscriptDelta",
    "SessionOutputTranscriptDelta",
    "SessionOutputAudioDelta",
    "Ping",
]
