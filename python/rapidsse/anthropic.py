"""Typed events of the Anthropic Messages stream (``POST /v1/messages``, ``stream: true``).

Each SSE event is named for its type and its JSON repeats it (``"type"``); there is no ``[DONE]``.
A stream is ``message_start`` (the :class:`Message` with empty ``content``), then per content block
``content_block_start`` -> ``content_block_delta``\\* -> ``content_block_stop``, then
``message_delta`` (stop reason, cumulative usage) and ``message_stop``; ``ping`` may come anywhere
and an ``error`` event may end the stream at any point.

Content blocks (:data:`ContentBlock`) and deltas (:data:`Delta`) are tagged unions on ``type``;
a block, delta or citation of a type these schemas do not know is kept as the union's
:class:`~rapidsse._schema.UnknownVariant` member (``original_type`` and the whole object in
``data``), an unknown event as :class:`~rapidsse.UnknownEvent`. Nearly every field has a default,
since servers omit fields freely. :class:`Message` is also what
:class:`rapidsse.AnthropicAccumulator` builds from a stream.
"""

from __future__ import annotations

from typing import Any, Union, get_args

import msgspec

from ._schema import Model, Tagged, UnknownVariant

# ---------------------------------------------------------------------------------------------------
# Citations (of a text block; one more arrives with each citations_delta)


class CharLocation(Tagged, tag="char_location"):
    """A citation of a plain-text document by character range."""

    cited_text: str | None = None
    document_index: int | None = None
    document_title: str | None = None
    start_char_index: int | None = None
    end_char_index: int | None = None
    file_id: str | None = None


class PageLocation(Tagged, tag="page_location"):
    """A citation of a PDF document by page range."""

    cited_text: str | None = None
    document_index: int | None = None
    document_title: str | None = None
    start_page_number: int | None = None
    end_page_number: int | None = None
    file_id: str | None = None


class ContentBlockLocation(Tagged, tag="content_block_location"):
    """A citation of a custom-content document by block range."""

    cited_text: str | None = None
    document_index: int | None = None
    document_title: str | None = None
    start_block_index: int | None = None
    end_block_index: int | None = None
    file_id: str | None = None


class WebSearchResultLocation(Tagged, tag="web_search_result_location"):
    """A citation of a web search result."""

    cited_text: str | None = None
    encrypted_index: str | None = None
    title: str | None = None
    url: str | None = None


class SearchResultLocation(Tagged, tag="search_result_location"):
    """A citation of a search result block given in the request."""

    cited_text: str | None = None
    search_result_index: int | None = None
    source: str | None = None
    title: str | None = None
    start_block_index: int | None = None
    end_block_index: int | None = None


class UnknownCitation(UnknownVariant, tag="__unknown__"):
    """A citation of a type the schemas do not know (see ``UnknownVariant``)."""


Citation = Union[
    CharLocation, PageLocation, ContentBlockLocation, WebSearchResultLocation, SearchResultLocation, UnknownCitation
]

# ---------------------------------------------------------------------------------------------------
# Content blocks


class TextBlock(Tagged, tag="text"):
    """Text, with the citations that back it (``None`` when it has none)."""

    text: str = ""
    citations: list[Citation] | None = None


class ThinkingBlock(Tagged, tag="thinking"):
    """Extended thinking; ``signature`` must be sent back with it unchanged."""

    thinking: str = ""
    signature: str = ""


class RedactedThinkingBlock(Tagged, tag="redacted_thinking"):
    """Thinking the safety systems encrypted (``data``), to be sent back as it is."""

    data: str = ""


class ToolUseBlock(Tagged, tag="tool_use"):
    """A call of a client tool. ``input`` is parsed from the streamed ``input_json_delta``\\s."""

    id: str = ""
    name: str = ""
    input: Any = {}
    caller: Any = None


class ServerToolUseBlock(Tagged, tag="server_tool_use"):
    """A call of a server tool (web search, web fetch, code execution, advisor, ...)."""

    id: str = ""
    name: str = ""
    input: Any = {}
    caller: Any = None


class WebSearchResult(Tagged, tag="web_search_result"):
    """One result of a web search."""

    url: str | None = None
    title: str | None = None
    encrypted_content: str | None = None
    page_age: str | None = None


class WebSearchToolResultError(Tagged, tag="web_search_tool_result_error"):
    """A web search that failed (``error_code``: ``max_uses_exceeded``, ``unavailable``, ...)."""

    error_code: str | None = None


class UnknownWebSearchContent(UnknownVariant, tag="__unknown__"):
    """Web search content of a type the schemas do not know (see ``UnknownVariant``)."""


class WebSearchToolResultBlock(Tagged, tag="web_search_tool_result"):
    """The results of a server web search: a list of results, or an error object."""

    tool_use_id: str = ""
    content: Union[list[Union[WebSearchResult, UnknownWebSearchContent]], WebSearchToolResultError, UnknownWebSearchContent, None] = None
    caller: Any = None


class _ToolResultBlock(Tagged):
    """The result of a server tool's call ``tool_use_id``: ``content``, kept as plain JSON."""

    tool_use_id: str = ""
    content: Any = None


class WebFetchToolResultBlock(_ToolResultBlock, tag="web_fetch_tool_result"):
    """The result of a server web fetch (``content``: the fetched document or an error)."""

    caller: Any = None


class CodeExecutionToolResultBlock(_ToolResultBlock, tag="code_execution_tool_result"):
    """The result of server code execution (stdout, stderr, return code, files, or an error)."""


class BashCodeExecutionToolResultBlock(_ToolResultBlock, tag="bash_code_execution_tool_result"):
    """The result of a bash command run by the code execution tool."""


class TextEditorCodeExecutionToolResultBlock(_ToolResultBlock, tag="text_editor_code_execution_tool_result"):
    """The result of a file operation of the code execution tool's text editor."""


class ToolSearchToolResultBlock(_ToolResultBlock, tag="tool_search_tool_result"):
    """The tools found by the tool search tool (or an error)."""


class McpToolUseBlock(Tagged, tag="mcp_tool_use"):
    """A call of a tool of a remote MCP server."""

    id: str = ""
    name: str = ""
    server_name: str = ""
    input: Any = {}


class McpToolResultBlock(Tagged, tag="mcp_tool_result"):
    """The result of an MCP tool call: a string or a list of text blocks."""

    tool_use_id: str = ""
    is_error: bool = False
    content: Union[str, list[Any], None] = None


class ContainerUploadBlock(Tagged, tag="container_upload"):
    """A file uploaded into the code execution container."""

    file_id: str = ""


class CompactionBlock(Tagged, tag="compaction"):
    """A summary of the context compacted away (``content``), or its encrypted form."""

    content: str | None = None
    encrypted_content: str | None = None
    signature: str | None = None
    tool_changes: Any = None


class UnknownContentBlock(UnknownVariant, tag="__unknown__"):
    """A content block of a type the schemas do not know, e.g. ``advisor_tool_result`` or
    ``fallback`` (see ``UnknownVariant``)."""


ContentBlock = Union[
    TextBlock,
    ThinkingBlock,
    RedactedThinkingBlock,
    ToolUseBlock,
    ServerToolUseBlock,
    WebSearchToolResultBlock,
    WebFetchToolResultBlock,
    CodeExecutionToolResultBlock,
    BashCodeExecutionToolResultBlock,
    TextEditorCodeExecutionToolResultBlock,
    ToolSearchToolResultBlock,
    McpToolUseBlock,
    McpToolResultBlock,
    ContainerUploadBlock,
    CompactionBlock,
    UnknownContentBlock,
]

# ---------------------------------------------------------------------------------------------------
# Deltas of a content block


class TextDelta(Tagged, tag="text_delta"):
    """Text appended to a ``text`` block."""

    text: str = ""


class InputJsonDelta(Tagged, tag="input_json_delta"):
    """A piece of a tool call's input JSON (the pieces joined are the JSON of ``input``)."""

    partial_json: str = ""


class ThinkingDelta(Tagged, tag="thinking_delta"):
    """Thinking appended to a ``thinking`` block."""

    thinking: str = ""


class SignatureDelta(Tagged, tag="signature_delta"):
    """The signature of a ``thinking`` block (replaces it)."""

    signature: str = ""


class CitationsDelta(Tagged, tag="citations_delta"):
    """One citation appended to a ``text`` block's ``citations``."""

    citation: Union[Citation, None] = None


class CompactionDelta(Tagged, tag="compaction_delta"):
    """The content of a ``compaction`` block (replaces it)."""

    content: str | None = None
    encrypted_content: str | None = None


class UnknownDelta(UnknownVariant, tag="__unknown__"):
    """A delta of a type the schemas do not know (see ``UnknownVariant``)."""


Delta = Union[TextDelta, InputJsonDelta, ThinkingDelta, SignatureDelta, CitationsDelta, CompactionDelta, UnknownDelta]

# ---------------------------------------------------------------------------------------------------
# The message


class CacheCreation(Model):
    """Input tokens written to the prompt cache, by lifetime."""

    ephemeral_5m_input_tokens: int | None = None
    ephemeral_1h_input_tokens: int | None = None


class ServerToolUsage(Model):
    """How many server tool requests the message made."""

    web_search_requests: int | None = None
    web_fetch_requests: int | None = None


class Usage(Model):
    """Token usage of a message (``message_delta`` events update it key by key)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation: CacheCreation | None = None
    server_tool_use: ServerToolUsage | None = None
    service_tier: str | None = None
    inference_geo: str | None = None
    speed: str | None = None
    output_tokens_details: dict[str, Any] | None = None
    iterations: list[dict[str, Any]] | None = None
    fallback_credit: Any = None


class Message(Model):
    """A message: in ``message_start`` with no content yet, and as an accumulator builds it."""

    id: str = ""
    type: str = "message"
    role: str = "assistant"
    model: str = ""
    content: list[ContentBlock] = []
    stop_reason: str | None = None
    stop_sequence: str | None = None
    stop_details: Any = None
    usage: Usage | None = None
    container: Any = None
    context_management: Any = None
    input_transformations: Any = None
    diagnostics: Any = None


class MessageDeltaBody(Model):
    """What ``message_delta`` changes at the top level of the message."""

    stop_reason: str | None = None
    stop_sequence: str | None = None
    stop_details: Any = None
    container: Any = None


class ErrorDetail(Model):
    """The ``error`` object of an ``error`` event (``type``: ``overloaded_error``, ...)."""

    type: str | None = None
    message: str | None = None


# ---------------------------------------------------------------------------------------------------
# Events


class MessageStart(Tagged, tag="message_start"):
    """The start of the stream: the message with empty ``content``."""

    message: Message = msgspec.field(default_factory=Message)


class ContentBlockStart(Tagged, tag="content_block_start"):
    """A new content block at ``index`` (text blocks start empty, tool inputs as ``{}``)."""

    index: int = 0
    content_block: Union[ContentBlock, None] = None


class ContentBlockDelta(Tagged, tag="content_block_delta"):
    """A delta of the content block at ``index``."""

    index: int = 0
    delta: Union[Delta, None] = None


class ContentBlockStop(Tagged, tag="content_block_stop"):
    """The end of the content block at ``index``."""

    index: int = 0


class MessageDelta(Tagged, tag="message_delta"):
    """The stop reason and the cumulative usage, near the end of the stream."""

    delta: MessageDeltaBody = msgspec.field(default_factory=MessageDeltaBody)
    usage: Usage | None = None
    context_management: Any = None
    input_transformations: Any = None


class MessageStop(Tagged, tag="message_stop"):
    """The end of the stream."""


class Ping(Tagged, tag="ping"):
    """A keep-alive."""


class Error(Tagged, tag="error"):
    """An error that ends the stream (``raise_on_error_event=True`` raises it as StreamError)."""

    error: ErrorDetail | None = None


Event = Union[
    MessageStart,
    ContentBlockStart,
    ContentBlockDelta,
    ContentBlockStop,
    MessageDelta,
    MessageStop,
    Ping,
    Error,
]

EVENT_TYPES: dict[str, type] = {cls.__struct_config__.tag: cls for cls in get_args(Event)}
"""The Struct of each wire event type."""

__all__ = [
    "Event",
    "EVENT_TYPES",
    "Message",
    "Usage",
    "CacheCreation",
    "ServerToolUsage",
    "MessageDeltaBody",
    "ErrorDetail",
    "ContentBlock",
    "Delta",
    "Citation",
    "MessageStart",
    "ContentBlockStart",
    "ContentBlockDelta",
    "ContentBlockStop",
    "MessageDelta",
    "MessageStop",
    "Ping",
    "Error",
    "TextBlock",
    "ThinkingBlock",
    "RedactedThinkingBlock",
    "ToolUseBlock",
    "ServerToolUseBlock",
    "WebSearchResult",
    "WebSearchToolResultError",
    "WebSearchToolResultBlock",
    "WebFetchToolResultBlock",
    "CodeExecutionToolResultBlock",
    "BashCodeExecutionToolResultBlock",
    "TextEditorCodeExecutionToolResultBlock",
    "ToolSearchToolResultBlock",
    "McpToolUseBlock",
    "McpToolResultBlock",
    "ContainerUploadBlock",
    "CompactionBlock",
    "UnknownContentBlock",
    "UnknownWebSearchContent",
    "TextDelta",
    "InputJsonDelta",
    "ThinkingDelta",
    "SignatureDelta",
    "CitationsDelta",
    "CompactionDelta",
    "UnknownDelta",
    "CharLocation",
    "PageLocation",
    "ContentBlockLocation",
    "WebSearchResultLocation",
    "SearchResultLocation",
    "UnknownCitation",
]
