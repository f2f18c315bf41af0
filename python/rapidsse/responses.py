"""Typed events of the OpenAI Responses API stream (``POST /v1/responses`` with ``stream: true``).

Each event type is a Struct tagged on its wire ``type`` (``OutputTextDelta`` is
``"response.output_text.delta"``); :data:`Event` is their union and :data:`EVENT_TYPES` maps each
wire type to its Struct. :class:`Response` is the response object that lifecycle events carry.

The schemas follow OpenAI's API and also accept what other servers send (vLLM, SGLang, Ollama,
llama.cpp, Friendli, DeepSeek, Bedrock): indices, ``sequence_number``, ``logprobs``, annotations and
item ids are optional, unknown fields are ignored, and vendor events (``keepalive``,
``response.rate_limits.updated``, ``response.reasoning_part.*``) have Structs of their own. Nested
objects of unknown types decode through :func:`rapidsse._schema.decode_lenient` into the
``Unknown*`` members of their unions.
"""

from __future__ import annotations

from typing import Any, Union, get_args

from ._schema import Model, RateLimit, Tagged, TopLogprob, UnknownVariant

# ---------------------------------------------------------------------------------------------------
# Text annotations and log probabilities


class FileCitation(Tagged, tag="file_citation"):
    """A citation of an uploaded file (file search)."""

    file_id: str | None = None
    filename: str | None = None
    index: int | None = None


class UrlCitation(Tagged, tag="url_citation"):
    """A citation of a web page (web search): the cited URL and the span of text it supports."""

    url: str | None = None
    title: str | None = None
    start_index: int | None = None
    end_index: int | None = None


class ContainerFileCitation(Tagged, tag="container_file_citation"):
    """A citation of a file in a code interpreter container."""

    container_id: str | None = None
    file_id: str | None = None
    filename: str | None = None
    start_index: int | None = None
    end_index: int | None = None


class FilePath(Tagged, tag="file_path"):
    """A path to a file the model produced (code interpreter)."""

    file_id: str | None = None
    index: int | None = None


class UnknownAnnotation(UnknownVariant, tag="__unknown__"):
    """An annotation of a type the schemas do not know (see ``UnknownVariant``)."""


Annotation = Union[FileCitation, UrlCitation, ContainerFileCitation, FilePath, UnknownAnnotation]


class Logprob(Model):
    """A sampled token, its log probability and the most likely alternatives."""

    token: str | None = None
    logprob: float | None = None
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] | None = []


# ---------------------------------------------------------------------------------------------------
# Content parts


class OutputText(Tagged, tag="output_text"):
    """Text the model wrote, in a message item or a ``content_part`` event."""

    text: str = ""
    annotations: list[Annotation] | None = []
    logprobs: list[Logprob] | None = None


class Refusal(Tagged, tag="refusal"):
    """The model's refusal to answer, in a message item or a ``content_part`` event."""

    refusal: str = ""


class ReasoningText(Tagged, tag="reasoning_text"):
    """Raw reasoning text (open-weight reasoning models), in a reasoning item or a part event."""

    text: str = ""


class UnknownContentPart(UnknownVariant, tag="__unknown__"):
    """A content part of a type the schemas do not know (see ``UnknownVariant``)."""


ContentPart = Union[OutputText, Refusal, ReasoningText, UnknownContentPart]


class SummaryText(Model):
    """One part of a reasoning summary (``type`` is ``"summary_text"``)."""

    type: str = "summary_text"
    text: str = ""


class InputContent(Model):
    """A part of a tool call's output given as content: ``input_text``, ``input_image``, ``input_file``."""

    type: str | None = None
    text: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    file_url: str | None = None
    file_data: str | None = None
    filename: str | None = None
    detail: str | None = None


class Caller(Model):
    """Who made a tool call: ``direct`` (the model) or a ``program`` (programmatic tool calling)."""

    type: str | None = None
    caller_id: str | None = None


# ---------------------------------------------------------------------------------------------------
# Tools (the ``tools`` of a response)


class FunctionTool(Tagged, tag="function"):
    """A function the model may call, defined by a JSON Schema of its parameters."""

    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None
    output_schema: dict[str, Any] | None = None


class FileSearchTool(Tagged, tag="file_search"):
    """The file search tool over vector stores."""

    vector_store_ids: list[str] | None = None
    filters: Any = None
    max_num_results: int | None = None
    ranking_options: Any = None


class ComputerTool(Tagged, tag="computer"):
    """The computer use tool."""


class ComputerUsePreviewTool(Tagged, tag="computer_use_preview"):
    """The computer use tool (preview), with the display size and environment."""

    display_width: int | None = None
    display_height: int | None = None
    environment: str | None = None


class WebSearchTool(Tagged, tag="web_search"):
    """The web search tool."""

    filters: Any = None
    search_context_size: str | None = None
    user_location: dict[str, Any] | None = None
    external_web_access: bool | None = None


class WebSearchTool20250826(WebSearchTool, tag="web_search_2025_08_26"):
    """The web search tool, version of 2025-08-26."""


class WebSearchPreviewTool(Tagged, tag="web_search_preview"):
    """The web search tool (preview)."""

    search_context_size: str | None = None
    search_content_types: list[str] | None = None
    user_location: dict[str, Any] | None = None


class WebSearchPreviewTool20250311(WebSearchPreviewTool, tag="web_search_preview_2025_03_11"):
    """The web search tool (preview), version of 2025-03-11."""


class McpTool(Tagged, tag="mcp"):
    """A remote MCP server or connector whose tools the model may call."""

    server_label: str | None = None
    server_url: str | None = None
    server_description: str | None = None
    connector_id: str | None = None
    allowed_tools: Any = None
    require_approval: Any = None
    headers: dict[str, Any] | None = None
    authorization: str | None = None
    defer_loading: bool | None = None


class CodeInterpreterTool(Tagged, tag="code_interpreter"):
    """The code interpreter tool; ``container`` is a container id or an auto-container config."""

    container: str | dict[str, Any] | None = None


class ProgrammaticToolCallingTool(Tagged, tag="programmatic_tool_calling"):
    """Lets the model call tools from a program it writes."""


class ImageGenerationTool(Tagged, tag="image_generation"):
    """The image generation tool."""

    model: str | None = None
    action: str | None = None
    background: str | None = None
    quality: str | None = None
    size: str | None = None
    output_format: str | None = None
    output_compression: int | None = None
    partial_images: int | None = None
    moderation: str | None = None
    input_fidelity: str | None = None
    input_image_mask: dict[str, Any] | None = None


class LocalShellTool(Tagged, tag="local_shell"):
    """The local shell tool (the client runs the commands)."""


class ShellTool(Tagged, tag="shell"):
    """The shell tool, with the environment it runs in."""

    environment: dict[str, Any] | None = None


class CustomTool(Tagged, tag="custom"):
    """A custom tool taking free-form text input, optionally constrained by a grammar."""

    name: str | None = None
    description: str | None = None
    format: dict[str, Any] | None = None
    defer_loading: bool | None = None


class NamespaceTool(Tagged, tag="namespace"):
    """A named group of tools."""

    name: str | None = None
    description: str | None = None
    tools: list[Tool] = []


class ToolSearchTool(Tagged, tag="tool_search"):
    """The tool search tool, which finds deferred tools on demand."""

    description: str | None = None
    execution: str | None = None
    parameters: Any = None


class ApplyPatchTool(Tagged, tag="apply_patch"):
    """The apply-patch tool (file edits as diffs)."""


class UnknownTool(UnknownVariant, tag="__unknown__"):
    """A tool of a type the schemas do not know (see ``UnknownVariant``)."""


Tool = Union[
    FunctionTool,
    FileSearchTool,
    ComputerTool,
    ComputerUsePreviewTool,
    WebSearchTool,
    WebSearchTool20250826,
    WebSearchPreviewTool,
    WebSearchPreviewTool20250311,
    McpTool,
    CodeInterpreterTool,
    ProgrammaticToolCallingTool,
    ImageGenerationTool,
    LocalShellTool,
    ShellTool,
    CustomTool,
    NamespaceTool,
    ToolSearchTool,
    ApplyPatchTool,
    UnknownTool,
]


# ---------------------------------------------------------------------------------------------------
# Output items


class OutputMessage(Tagged, tag="message"):
    """An assistant message: its content parts (text or refusal)."""

    id: str | None = None
    role: str = "assistant"
    status: str | None = None
    content: list[ContentPart] = []
    phase: str | None = None


class ReasoningItem(Tagged, tag="reasoning"):
    """The model's reasoning: summary parts, raw reasoning text, and/or encrypted content."""

    id: str | None = None
    summary: list[SummaryText] | None = []
    content: list[ContentPart] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class FunctionCall(Tagged, tag="function_call"):
    """A call of a function tool; ``arguments`` is a JSON string."""

    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str = ""
    status: str | None = None
    namespace: str | None = None
    caller: Caller | None = None


class FunctionCallOutput(Tagged, tag="function_call_output"):
    """The result of a function call, as text or content parts."""

    id: str | None = None
    call_id: str | None = None
    output: str | list[InputContent] | None = None
    status: str | None = None
    name: str | None = None
    namespace: str | None = None
    caller: Caller | None = None
    created_by: str | None = None


class CustomToolCall(Tagged, tag="custom_tool_call"):
    """A call of a custom tool with free-form text ``input``."""

    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    input: str = ""
    namespace: str | None = None
    caller: Caller | None = None


class CustomToolCallOutput(Tagged, tag="custom_tool_call_output"):
    """The result of a custom tool call."""

    id: str | None = None
    call_id: str | None = None
    output: str | list[InputContent] | None = None
    status: str | None = None
    caller: Caller | None = None
    created_by: str | None = None


class WebSearchSource(Model):
    """A source consulted by a web search: a ``url``, or an ``api`` with its ``name``."""

    type: str | None = None
    url: str | None = None
    name: str | None = None


class WebSearchSearch(Tagged, tag="search"):
    """A web search action: the query (or queries) and the sources consulted."""

    query: str | None = None
    queries: list[str] | None = None
    sources: list[WebSearchSource] | None = None


class WebSearchOpenPage(Tagged, tag="open_page"):
    """A web search action that opens a page."""

    url: str | None = None


class WebSearchFindInPage(Tagged, tag="find_in_page"):
    """A web search action that looks for a pattern in a page."""

    url: str | None = None
    pattern: str | None = None


class UnknownWebSearchAction(UnknownVariant, tag="__unknown__"):
    """A web search action of a type the schemas do not know (see ``UnknownVariant``)."""


WebSearchAction = Union[WebSearchSearch, WebSearchOpenPage, WebSearchFindInPage, UnknownWebSearchAction]


class WebSearchCall(Tagged, tag="web_search_call"):
    """A call of the web search tool and the action it took."""

    id: str | None = None
    status: str | None = None
    action: WebSearchAction | None = None


class FileSearchResult(Model):
    """One result of a file search."""

    file_id: str | None = None
    filename: str | None = None
    score: float | None = None
    text: str | None = None
    attributes: dict[str, Any] | None = None


class FileSearchCall(Tagged, tag="file_search_call"):
    """A call of the file search tool: its queries and results."""

    id: str | None = None
    status: str | None = None
    queries: list[str] | None = []
    results: list[FileSearchResult] | None = None


class CodeInterpreterLogs(Tagged, tag="logs"):
    """Text logs a code interpreter run printed."""

    logs: str = ""


class CodeInterpreterImage(Tagged, tag="image"):
    """An image a code interpreter run produced (``url`` may be a ``data:`` URL)."""

    url: str | None = None


class UnknownCodeInterpreterOutput(UnknownVariant, tag="__unknown__"):
    """A code interpreter output of a type the schemas do not know (see ``UnknownVariant``)."""


CodeInterpreterOutput = Union[CodeInterpreterLogs, CodeInterpreterImage, UnknownCodeInterpreterOutput]


class CodeInterpreterCall(Tagged, tag="code_interpreter_call"):
    """A run of the code interpreter: the code, the container and the outputs."""

    id: str | None = None
    status: str | None = None
    code: str | None = None
    container_id: str | None = None
    outputs: list[CodeInterpreterOutput] | None = None


class ToolError(Model):
    """An error reported by a tool call (image generation, MCP): type, code and message."""

    type: str | None = None
    code: str | int | None = None
    message: str | None = None
    param: str | None = None
    content: Any = None


class ImageGenerationCall(Tagged, tag="image_generation_call"):
    """A call of the image generation tool; ``result`` is the base64 image."""

    id: str | None = None
    status: str | None = None
    result: str | None = None
    revised_prompt: str | None = None
    action: str | None = None
    background: str | None = None
    output_format: str | None = None
    quality: str | None = None
    size: str | None = None
    error: ToolError | None = None


class McpCall(Tagged, tag="mcp_call"):
    """A call of a tool on a remote MCP server, with its output or error."""

    id: str | None = None
    server_label: str | None = None
    name: str | None = None
    arguments: str = ""
    output: str | None = None
    error: ToolError | str | None = None
    status: str | None = None
    approval_request_id: str | None = None


class McpToolInfo(Model):
    """A tool an MCP server offers: its name, description and input schema."""

    name: str | None = None
    description: str | None = None
    input_schema: Any = None
    annotations: Any = None


class McpListTools(Tagged, tag="mcp_list_tools"):
    """The list of tools an MCP server offers (or the error listing them)."""

    id: str | None = None
    server_label: str | None = None
    tools: list[McpToolInfo] | None = []
    error: str | dict[str, Any] | None = None


class McpApprovalRequest(Tagged, tag="mcp_approval_request"):
    """A request for the user's approval of an MCP tool call."""

    id: str | None = None
    server_label: str | None = None
    name: str | None = None
    arguments: str | None = None


class McpApprovalResponse(Tagged, tag="mcp_approval_response"):
    """The user's answer to an MCP approval request."""

    id: str | None = None
    approval_request_id: str | None = None
    approve: bool | None = None
    reason: str | None = None


class LocalShellAction(Model):
    """The command a local shell call runs (``type`` is ``"exec"``)."""

    type: str | None = None
    command: list[str] = []
    env: dict[str, str] | None = None
    timeout_ms: int | None = None
    user: str | None = None
    working_directory: str | None = None


class LocalShellCall(Tagged, tag="local_shell_call"):
    """A call of the local shell tool."""

    id: str | None = None
    call_id: str | None = None
    status: str | None = None
    action: LocalShellAction | None = None


class LocalShellCallOutput(Tagged, tag="local_shell_call_output"):
    """The output of a local shell call."""

    id: str | None = None
    output: str | None = None
    status: str | None = None


class ShellAction(Model):
    """The commands a shell call runs."""

    commands: list[str] = []
    max_output_length: int | None = None
    timeout_ms: int | None = None


class ShellCall(Tagged, tag="shell_call"):
    """A call of the shell tool."""

    id: str | None = None
    call_id: str | None = None
    status: str | None = None
    action: ShellAction | None = None
    environment: dict[str, Any] | None = None
    caller: Caller | None = None
    created_by: str | None = None


class ShellOutcome(Model):
    """How a shell command ended: ``exit`` with ``exit_code``, or ``timeout``."""

    type: str | None = None
    exit_code: int | None = None


class ShellOutput(Model):
    """The output of one shell command."""

    stdout: str = ""
    stderr: str = ""
    outcome: ShellOutcome | None = None
    created_by: str | None = None


class ShellCallOutput(Tagged, tag="shell_call_output"):
    """The outputs of a shell call's commands."""

    id: str | None = None
    call_id: str | None = None
    status: str | None = None
    output: list[ShellOutput] = []
    max_output_length: int | None = None
    caller: Caller | None = None
    created_by: str | None = None


class PatchOperation(Model):
    """A file operation of an apply-patch call: ``create_file``, ``update_file`` or ``delete_file``."""

    type: str | None = None
    path: str | None = None
    diff: str | None = None


class ApplyPatchCall(Tagged, tag="apply_patch_call"):
    """A call of the apply-patch tool."""

    id: str | None = None
    call_id: str | None = None
    status: str | None = None
    operation: PatchOperation | None = None
    caller: Caller | None = None
    created_by: str | None = None


class ApplyPatchCallOutput(Tagged, tag="apply_patch_call_output"):
    """The result of an apply-patch call."""

    id: str | None = None
    call_id: str | None = None
    status: str | None = None
    output: str | None = None
    caller: Caller | None = None
    created_by: str | None = None


class Point(Model):
    """A screen position."""

    x: int | None = None
    y: int | None = None


class ComputerAction(Model):
    """A computer use action (``click``, ``double_click``, ``drag``, ``keypress``, ``move``,
    ``screenshot``, ``scroll``, ``type``, ``wait``) with the fields its type uses."""

    type: str | None = None
    x: int | None = None
    y: int | None = None
    button: str | None = None
    keys: list[str] | None = None
    path: list[Point] | None = None
    scroll_x: int | None = None
    scroll_y: int | None = None
    text: str | None = None


class SafetyCheck(Model):
    """A pending or acknowledged safety check of a computer call."""

    id: str | None = None
    code: str | None = None
    message: str | None = None


class ComputerCall(Tagged, tag="computer_call"):
    """A call of the computer use tool: the action(s) to perform."""

    id: str | None = None
    call_id: str | None = None
    status: str | None = None
    action: ComputerAction | None = None
    actions: list[ComputerAction] | None = None
    pending_safety_checks: list[SafetyCheck] | None = []


class ComputerScreenshot(Model):
    """A screenshot returned for a computer call."""

    type: str | None = None
    file_id: str | None = None
    image_url: str | None = None


class ComputerCallOutput(Tagged, tag="computer_call_output"):
    """The result of a computer call (a screenshot)."""

    id: str | None = None
    call_id: str | None = None
    status: str | None = None
    output: ComputerScreenshot | None = None
    acknowledged_safety_checks: list[SafetyCheck] | None = None
    created_by: str | None = None


class ToolSearchCall(Tagged, tag="tool_search_call"):
    """A call of the tool search tool; ``arguments`` is the search as a JSON object."""

    id: str | None = None
    call_id: str | None = None
    status: str | None = None
    execution: str | None = None
    arguments: Any = None
    created_by: str | None = None


class ToolSearchOutput(Tagged, tag="tool_search_output"):
    """The tools a tool search found."""

    id: str | None = None
    call_id: str | None = None
    status: str | None = None
    execution: str | None = None
    tools: list[Tool] | None = []
    created_by: str | None = None


class Compaction(Tagged, tag="compaction"):
    """A compaction of the conversation so far, as encrypted content."""

    id: str | None = None
    encrypted_content: str | None = None
    created_by: str | None = None


class AdditionalTools(Tagged, tag="additional_tools"):
    """Tools added to the conversation by an item."""

    id: str | None = None
    role: str | None = None
    tools: list[Tool] | None = []


class Program(Tagged, tag="program"):
    """A program the model wrote to call tools (programmatic tool calling)."""

    id: str | None = None
    call_id: str | None = None
    code: str | None = None
    fingerprint: str | None = None


class ProgramOutput(Tagged, tag="program_output"):
    """The result of a program run."""

    id: str | None = None
    call_id: str | None = None
    result: str | None = None
    status: str | None = None


class UnknownOutputItem(UnknownVariant, tag="__unknown__"):
    """An output item of a type the schemas do not know (see ``UnknownVariant``)."""


OutputItem = Union[
    OutputMessage,
    ReasoningItem,
    FunctionCall,
    FunctionCallOutput,
    CustomToolCall,
    CustomToolCallOutput,
    WebSearchCall,
    FileSearchCall,
    CodeInterpreterCall,
    ImageGenerationCall,
    McpCall,
    McpListTools,
    McpApprovalRequest,
    McpApprovalResponse,
    LocalShellCall,
    LocalShellCallOutput,
    ShellCall,
    ShellCallOutput,
    ApplyPatchCall,
    ApplyPatchCallOutput,
    ComputerCall,
    ComputerCallOutput,
    ToolSearchCall,
    ToolSearchOutput,
    Compaction,
    AdditionalTools,
    Program,
    ProgramOutput,
    UnknownOutputItem,
]


# ---------------------------------------------------------------------------------------------------
# The response object


class InputTokensDetails(Model):
    """Breakdown of input tokens."""

    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


class OutputTokensDetails(Model):
    """Breakdown of output tokens."""

    reasoning_tokens: int | None = None


class Usage(Model):
    """Token usage of a response."""

    input_tokens: int | None = None
    input_tokens_details: InputTokensDetails | None = None
    output_tokens: int | None = None
    output_tokens_details: OutputTokensDetails | None = None
    total_tokens: int | None = None


class ResponseError(Model):
    """Why a response failed."""

    code: str | int | None = None
    message: str | None = None
    param: str | None = None
    type: str | None = None


class IncompleteDetails(Model):
    """Why a response is incomplete (e.g. ``max_output_tokens``, ``content_filter``)."""

    reason: str | None = None


class ReasoningConfig(Model):
    """The reasoning settings of a response."""

    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None
    context: str | None = None


class TextConfig(Model):
    """The text output settings of a response (format, verbosity)."""

    format: dict[str, Any] | None = None
    verbosity: str | None = None


class Conversation(Model):
    """The conversation a response belongs to."""

    id: str | None = None


class Response(Model):
    """A response: its status, output items, usage, error, and the settings it was created with.

    Carried whole by ``response.created``, ``.queued``, ``.in_progress``, ``.completed``,
    ``.incomplete`` and ``.failed``.
    """

    id: str | None = None
    object: str | None = None
    created_at: int | float | None = None
    completed_at: int | float | None = None
    status: str | None = None
    model: str | None = None
    output: list[OutputItem] = []
    usage: Usage | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | list[Any] | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    metadata: dict[str, Any] | None = None
    tools: list[Tool] | None = []
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    previous_response_id: str | None = None
    conversation: Conversation | None = None
    reasoning: ReasoningConfig | None = None
    text: TextConfig | None = None
    truncation: str | None = None
    store: bool | None = None
    background: bool | None = None
    service_tier: str | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None


# ---------------------------------------------------------------------------------------------------
# Events: shared fields


class _Event(Tagged, kw_only=True):
    """Fields of every event. ``sequence_number`` counts events from 0 (not all servers send it)."""

    sequence_number: int | None = None


class _ResponseEvent(_Event):
    """An event carrying the whole response."""

    response: Response


class _ItemEvent(_Event, kw_only=True):
    """An event about one output item (``item_id``) at ``output_index``."""

    item_id: str | None = None
    output_index: int | None = None


class _ContentEvent(_ItemEvent, kw_only=True):
    """An event about one content part (``content_index``) of an output item."""

    content_index: int | None = None


class _SummaryEvent(_ItemEvent, kw_only=True):
    """An event about one reasoning summary part (``summary_index``) of a reasoning item."""

    summary_index: int | None = None


# ---------------------------------------------------------------------------------------------------
# Events: lifecycle


class ResponseCreated(_ResponseEvent, tag="response.created"):
    """The response was created (first event of a stream)."""


class ResponseQueued(_ResponseEvent, tag="response.queued"):
    """The response is queued (background mode)."""


class ResponseInProgress(_ResponseEvent, tag="response.in_progress"):
    """The response is being generated."""


class ResponseCompleted(_ResponseEvent, tag="response.completed"):
    """The response finished; ``response`` holds the final output and usage."""


class ResponseIncomplete(_ResponseEvent, tag="response.incomplete"):
    """The response ended early; ``response.incomplete_details`` says why."""


class ResponseFailed(_ResponseEvent, tag="response.failed"):
    """The response failed; ``response.error`` says why."""


class ErrorDetail(Model):
    """The nested ``error`` object some servers send in an ``error`` event."""

    type: str | None = None
    code: str | int | None = None
    message: str | None = None
    param: str | None = None


class Error(_Event, tag="error"):
    """An error in the stream. OpenAI sends ``code``/``message``/``param`` flat; some servers nest
    them in ``error``."""

    code: str | int | None = None
    message: str | None = None
    param: str | None = None
    error: ErrorDetail | None = None


# ---------------------------------------------------------------------------------------------------
# Events: output items and content parts


class OutputItemAdded(_Event, tag="response.output_item.added"):
    """A new output item started at ``output_index`` (its content follows in later events)."""

    item: OutputItem
    output_index: int | None = None


class OutputItemDone(_Event, tag="response.output_item.done"):
    """An output item is complete; ``item`` is its final state."""

    item: OutputItem
    output_index: int | None = None


class ContentPartAdded(_ContentEvent, tag="response.content_part.added"):
    """A new content part started in a message or reasoning item."""

    part: ContentPart


class ContentPartDone(_ContentEvent, tag="response.content_part.done"):
    """A content part is complete; ``part`` is its final state."""

    part: ContentPart


class OutputTextDelta(_ContentEvent, tag="response.output_text.delta"):
    """A piece of output text."""

    delta: str
    logprobs: list[Logprob] | None = None
    obfuscation: str | None = None


class OutputTextDone(_ContentEvent, tag="response.output_text.done"):
    """An output text part is complete; ``text`` is all of it."""

    text: str | None = None
    logprobs: list[Logprob] | None = None


class OutputTextAnnotationAdded(_ContentEvent, tag="response.output_text.annotation.added"):
    """An annotation (citation, file path) was added to an output text part."""

    annotation_index: int | None = None
    annotation: Annotation | None = None


class RefusalDelta(_ContentEvent, tag="response.refusal.delta"):
    """A piece of refusal text."""

    delta: str
    obfuscation: str | None = None


class RefusalDone(_ContentEvent, tag="response.refusal.done"):
    """A refusal part is complete; ``refusal`` is all of it."""

    refusal: str | None = None


class ReasoningTextDelta(_ContentEvent, tag="response.reasoning_text.delta"):
    """A piece of raw reasoning text."""

    delta: str
    obfuscation: str | None = None


class ReasoningTextDone(_ContentEvent, tag="response.reasoning_text.done"):
    """A raw reasoning text part is complete; ``text`` is all of it."""

    text: str | None = None


class ReasoningPartAdded(_ContentEvent, tag="response.reasoning_part.added"):
    """A reasoning content part started (vLLM's twin of ``content_part.added`` for reasoning)."""

    part: ContentPart | None = None


class ReasoningPartDone(_ContentEvent, tag="response.reasoning_part.done"):
    """A reasoning content part is complete (vLLM)."""

    part: ContentPart | None = None


class ReasoningSummaryPartAdded(_SummaryEvent, tag="response.reasoning_summary_part.added"):
    """A new reasoning summary part started."""

    part: SummaryText | None = None


class ReasoningSummaryPartDone(_SummaryEvent, tag="response.reasoning_summary_part.done"):
    """A reasoning summary part is complete."""

    part: SummaryText | None = None
    status: str | None = None


class ReasoningSummaryTextDelta(_SummaryEvent, tag="response.reasoning_summary_text.delta"):
    """A piece of reasoning summary text."""

    delta: str
    obfuscation: str | None = None


class ReasoningSummaryTextDone(_SummaryEvent, tag="response.reasoning_summary_text.done"):
    """A reasoning summary text is complete; ``text`` is all of it."""

    text: str | None = None


class AudioDelta(_Event, tag="response.audio.delta"):
    """A chunk of output audio (base64)."""

    delta: str
    item_id: str | None = None
    output_index: int | None = None
    content_index: int | None = None


class AudioDone(_Event, tag="response.audio.done"):
    """The output audio is complete."""

    item_id: str | None = None
    output_index: int | None = None
    content_index: int | None = None


class AudioTranscriptDelta(_Event, tag="response.audio.transcript.delta"):
    """A piece of the output audio's transcript."""

    delta: str
    item_id: str | None = None
    output_index: int | None = None
    content_index: int | None = None


class AudioTranscriptDone(_Event, tag="response.audio.transcript.done"):
    """The output audio's transcript is complete."""

    transcript: str | None = None
    item_id: str | None = None
    output_index: int | None = None
    content_index: int | None = None


# ---------------------------------------------------------------------------------------------------
# Events: tool calls


class FunctionCallArgumentsDelta(_ItemEvent, tag="response.function_call_arguments.delta"):
    """A piece of a function call's JSON arguments."""

    delta: str
    obfuscation: str | None = None


class FunctionCallArgumentsDone(_ItemEvent, tag="response.function_call_arguments.done"):
    """A function call's arguments are complete."""

    arguments: str | None = None
    name: str | None = None


class CustomToolCallInputDelta(_ItemEvent, tag="response.custom_tool_call_input.delta"):
    """A piece of a custom tool call's input."""

    delta: str
    obfuscation: str | None = None


class CustomToolCallInputDone(_ItemEvent, tag="response.custom_tool_call_input.done"):
    """A custom tool call's input is complete."""

    input: str | None = None


class McpCallArgumentsDelta(_ItemEvent, tag="response.mcp_call_arguments.delta"):
    """A piece of an MCP tool call's JSON arguments."""

    delta: str
    obfuscation: str | None = None


class McpCallArgumentsDone(_ItemEvent, tag="response.mcp_call_arguments.done"):
    """An MCP tool call's arguments are complete."""

    arguments: str | None = None


class McpCallInProgress(_ItemEvent, tag="response.mcp_call.in_progress"):
    """An MCP tool call started."""


class McpCallCompleted(_ItemEvent, tag="response.mcp_call.completed"):
    """An MCP tool call succeeded."""


class McpCallFailed(_ItemEvent, tag="response.mcp_call.failed"):
    """An MCP tool call failed."""


class McpListToolsInProgress(_ItemEvent, tag="response.mcp_list_tools.in_progress"):
    """Listing an MCP server's tools started."""


class McpListToolsCompleted(_ItemEvent, tag="response.mcp_list_tools.completed"):
    """Listing an MCP server's tools succeeded."""


class McpListToolsFailed(_ItemEvent, tag="response.mcp_list_tools.failed"):
    """Listing an MCP server's tools failed."""


class WebSearchCallInProgress(_ItemEvent, tag="response.web_search_call.in_progress"):
    """A web search call started."""


class WebSearchCallSearching(_ItemEvent, tag="response.web_search_call.searching"):
    """A web search call is searching."""


class WebSearchCallCompleted(_ItemEvent, tag="response.web_search_call.completed"):
    """A web search call finished."""


class FileSearchCallInProgress(_ItemEvent, tag="response.file_search_call.in_progress"):
    """A file search call started."""


class FileSearchCallSearching(_ItemEvent, tag="response.file_search_call.searching"):
    """A file search call is searching."""


class FileSearchCallCompleted(_ItemEvent, tag="response.file_search_call.completed"):
    """A file search call finished."""


class CodeInterpreterCallInProgress(_ItemEvent, tag="response.code_interpreter_call.in_progress"):
    """A code interpreter call started."""


class CodeInterpreterCallInterpreting(_ItemEvent, tag="response.code_interpreter_call.interpreting"):
    """A code interpreter call is running its code."""


class CodeInterpreterCallCompleted(_ItemEvent, tag="response.code_interpreter_call.completed"):
    """A code interpreter call finished."""


class CodeInterpreterCallCodeDelta(_ItemEvent, tag="response.code_interpreter_call_code.delta"):
    """A piece of the code a code interpreter call runs."""

    delta: str
    obfuscation: str | None = None


class CodeInterpreterCallCodeDone(_ItemEvent, tag="response.code_interpreter_call_code.done"):
    """The code of a code interpreter call is complete."""

    code: str | None = None


class ImageGenerationCallInProgress(_ItemEvent, tag="response.image_generation_call.in_progress"):
    """An image generation call started."""


class ImageGenerationCallGenerating(_ItemEvent, tag="response.image_generation_call.generating"):
    """An image generation call is generating."""


class ImageGenerationCallCompleted(_ItemEvent, tag="response.image_generation_call.completed"):
    """An image generation call finished."""


class ImageGenerationCallPartialImage(_ItemEvent, tag="response.image_generation_call.partial_image"):
    """A partial image (base64) while an image is being generated."""

    partial_image_b64: str
    partial_image_index: int | None = None
    background: str | None = None
    output_format: str | None = None
    quality: str | None = None
    size: str | None = None


class ShellCallCommandAdded(_ItemEvent, tag="response.shell_call_command.added"):
    """A shell call added a command (``command_index``)."""

    command_index: int | None = None
    command: str | None = None


class ShellCallCommandDelta(_ItemEvent, tag="response.shell_call_command.delta"):
    """A piece of a shell call's command."""

    delta: str
    command_index: int | None = None
    obfuscation: str | None = None


class ShellCallCommandDone(_ItemEvent, tag="response.shell_call_command.done"):
    """A shell call's command is complete."""

    command_index: int | None = None
    command: str | None = None


class ShellOutputDelta(Model):
    """A piece of a shell command's stdout and/or stderr."""

    stdout: str | None = None
    stderr: str | None = None


class ShellCallOutputContentDelta(_ItemEvent, tag="response.shell_call_output_content.delta"):
    """A piece of a shell command's output."""

    delta: ShellOutputDelta
    command_index: int | None = None


class ShellCallOutputContentDone(_ItemEvent, tag="response.shell_call_output_content.done"):
    """A shell command's output is complete."""

    command_index: int | None = None
    output: list[ShellOutput] = []


class CompactionCompacting(_ItemEvent, tag="response.compaction.compacting"):
    """The conversation is being compacted into a compaction item."""


# ---------------------------------------------------------------------------------------------------
# Events: vendor extras


class Keepalive(_Event, tag="keepalive"):
    """A keep-alive event (OpenAI) with no content."""


class RateLimitsUpdated(_Event, tag="response.rate_limits.updated"):
    """The current rate limits (OpenAI, sometimes sent after the final event)."""

    rate_limits: list[RateLimit] = []


Event = Union[
    ResponseCreated,
    ResponseQueued,
    ResponseInProgress,
    ResponseCompleted,
    ResponseIncomplete,
    ResponseFailed,
    Error,
    OutputItemAdded,
    OutputItemDone,
    ContentPartAdded,
    ContentPartDone,
    OutputTextDelta,
    OutputTextDone,
    OutputTextAnnotationAdded,
    RefusalDelta,
    RefusalDone,
    ReasoningTextDelta,
    ReasoningTextDone,
    ReasoningPartAdded,
    ReasoningPartDone,
    ReasoningSummaryPartAdded,
    ReasoningSummaryPartDone,
    ReasoningSummaryTextDelta,
    ReasoningSummaryTextDone,
    AudioDelta,
    AudioDone,
    AudioTranscriptDelta,
    AudioTranscriptDone,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    CustomToolCallInputDelta,
    CustomToolCallInputDone,
    McpCallArgumentsDelta,
    McpCallArgumentsDone,
    McpCallInProgress,
    McpCallCompleted,
    McpCallFailed,
    McpListToolsInProgress,
    McpListToolsCompleted,
    McpListToolsFailed,
    WebSearchCallInProgress,
    WebSearchCallSearching,
    WebSearchCallCompleted,
    FileSearchCallInProgress,
    FileSearchCallSearching,
    FileSearchCallCompleted,
    CodeInterpreterCallInProgress,
    CodeInterpreterCallInterpreting,
    CodeInterpreterCallCompleted,
    CodeInterpreterCallCodeDelta,
    CodeInterpreterCallCodeDone,
    ImageGenerationCallInProgress,
    ImageGenerationCallGenerating,
    ImageGenerationCallCompleted,
    ImageGenerationCallPartialImage,
    ShellCallCommandAdded,
    ShellCallCommandDelta,
    ShellCallCommandDone,
    ShellCallOutputContentDelta,
    ShellCallOutputContentDone,
    CompactionCompacting,
    Keepalive,
    RateLimitsUpdated,
]
"""Any Responses API stream event (the union to decode payloads as)."""

EVENT_TYPES: dict[str, type] = {cls.__struct_config__.tag: cls for cls in get_args(Event)}
"""The Struct of each wire event type."""

__all__ = [
    "Event",
    "EVENT_TYPES",
    "RateLimit",
    "FileCitation",
    "UrlCitation",
    "ContainerFileCitation",
    "FilePath",
    "UnknownAnnotation",
    "Annotation",
    "TopLogprob",
    "Logprob",
    "OutputText",
    "Refusal",
    "ReasoningText",
    "UnknownContentPart",
    "ContentPart",
    "SummaryText",
    "InputContent",
    "Caller",
    "FunctionTool",
    "FileSearchTool",
    "ComputerTool",
    "ComputerUsePreviewTool",
    "WebSearchTool",
    "WebSearchTool20250826",
    "WebSearchPreviewTool",
    "WebSearchPreviewTool20250311",
    "McpTool",
    "CodeInterpreterTool",
    "ProgrammaticToolCallingTool",
    "ImageGenerationTool",
    "LocalShellTool",
    "ShellTool",
    "CustomTool",
    "NamespaceTool",
    "ToolSearchTool",
    "ApplyPatchTool",
    "UnknownTool",
    "Tool",
    "OutputMessage",
    "ReasoningItem",
    "FunctionCall",
    "FunctionCallOutput",
    "CustomToolCall",
    "CustomToolCallOutput",
    "WebSearchSource",
    "WebSearchSearch",
    "WebSearchOpenPage",
    "WebSearchFindInPage",
    "UnknownWebSearchAction",
    "WebSearchAction",
    "WebSearchCall",
    "FileSearchResult",
    "FileSearchCall",
    "CodeInterpreterLogs",
    "CodeInterpreterImage",
    "UnknownCodeInterpreterOutput",
    "CodeInterpreterOutput",
    "CodeInterpreterCall",
    "ToolError",
    "ImageGenerationCall",
    "McpCall",
    "McpToolInfo",
    "McpListTools",
    "McpApprovalRequest",
    "McpApprovalResponse",
    "LocalShellAction",
    "LocalShellCall",
    "LocalShellCallOutput",
    "ShellAction",
    "ShellCall",
    "ShellOutcome",
    "ShellOutput",
    "ShellCallOutput",
    "PatchOperation",
    "ApplyPatchCall",
    "ApplyPatchCallOutput",
    "Point",
    "ComputerAction",
    "SafetyCheck",
    "ComputerCall",
    "ComputerScreenshot",
    "ComputerCallOutput",
    "ToolSearchCall",
    "ToolSearchOutput",
    "Compaction",
    "AdditionalTools",
    "Program",
    "ProgramOutput",
    "UnknownOutputItem",
    "OutputItem",
    "InputTokensDetails",
    "OutputTokensDetails",
    "Usage",
    "ResponseError",
    "IncompleteDetails",
    "ReasoningConfig",
    "TextConfig",
    "Conversation",
    "Response",
    "ResponseCreated",
    "ResponseQueued",
    "ResponseInProgress",
    "ResponseCompleted",
    "ResponseIncomplete",
    "ResponseFailed",
    "ErrorDetail",
    "Error",
    "OutputItemAdded",
    "OutputItemDone",
    "ContentPartAdded",
    "ContentPartDone",
    "OutputTextDelta",
    "OutputTextDone",
    "OutputTextAnnotationAdded",
    "RefusalDelta",
    "RefusalDone",
    "ReasoningTextDelta",
    "ReasoningTextDone",
    "ReasoningPartAdded",
    "ReasoningPartDone",
    "ReasoningSummaryPartAdded",
    "ReasoningSummaryPartDone",
    "ReasoningSummaryTextDelta",
    "ReasoningSummaryTextDone",
    "AudioDelta",
    "AudioDone",
    "AudioTranscriptDelta",
    "AudioTranscriptDone",
    "FunctionCallArgumentsDelta",
    "FunctionCallArgumentsDone",
    "CustomToolCallInputDelta",
    "CustomToolCallInputDone",
    "McpCallArgumentsDelta",
    "McpCallArgumentsDone",
    "McpCallInProgress",
    "McpCallCompleted",
    "McpCallFailed",
    "McpListToolsInProgress",
    "McpListToolsCompleted",
    "McpListToolsFailed",
    "WebSearchCallInProgress",
    "WebSearchCallSearching",
    "WebSearchCallCompleted",
    "FileSearchCallInProgress",
    "FileSearchCallSearching",
    "FileSearchCallCompleted",
    "CodeInterpreterCallInProgress",
    "CodeInterpreterCallInterpreting",
    "CodeInterpreterCallCompleted",
    "CodeInterpreterCallCodeDelta",
    "CodeInterpreterCallCodeDone",
    "ImageGenerationCallInProgress",
    "ImageGenerationCallGenerating",
    "ImageGenerationCallCompleted",
    "ImageGenerationCallPartialImage",
    "ShellCallCommandAdded",
    "ShellCallCommandDelta",
    "ShellCallCommandDone",
    "ShellOutputDelta",
    "ShellCallOutputContentDelta",
    "ShellCallOutputContentDone",
    "CompactionCompacting",
    "Keepalive",
    "RateLimitsUpdated",
]
