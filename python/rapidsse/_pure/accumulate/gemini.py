"""The Gemini accumulator core: the twin of ``rust/src/accumulate/gemini.rs`` (whose module docs
give the rules)."""

from __future__ import annotations

from typing import Any

from .json import _STR_TYPES
from .mod import _ChunkCore, _TextCap, _append_text, _index_of, _typed_reader


_GEMINI_UPDATED = ("usageMetadata", "modelVersion", "responseId", "promptFeedback", "createTime")
_typed_gemini = _typed_reader(frozenset(), frozenset(("candidates", "error") + _GEMINI_UPDATED))


def _text_kind(part: dict) -> bool | None:
    """Whether a text part is a thought; None when ``part`` is not a text part."""
    if not isinstance(part.get("text"), _STR_TYPES):
        return None
    thought = False
    for key, value in part.items():
        if key == "text" or (value is None and key in ("thought", "thoughtSignature")):
            continue
        if key == "thought" and type(value) is bool:
            thought = value
        elif key == "thoughtSignature" and type(value) is str:
            continue
        else:
            return None
    return thought


def _merge_part(parts: list, part: Any, cap: _TextCap) -> None:
    if not isinstance(part, dict):
        parts.append(part)
        return
    kind = _text_kind(part)
    if kind is None:
        parts.append(part)
        return
    last = parts[-1] if parts else None
    if (
        isinstance(last, dict)
        and _text_kind(last) == kind
        and (last.get("thoughtSignature") is None or part.get("thoughtSignature") is None)
    ):
        _append_text(last, "text", part["text"], cap)
        signature = part.get("thoughtSignature")
        if signature is not None:
            last["thoughtSignature"] = signature
        return
    if not cap.admits(0, part["text"]):
        part["text"] = ""
    parts.append(part)


def _merge_content(ours: dict, content: dict, cap: _TextCap) -> None:
    for key, value in content.items():
        if key == "parts":
            if isinstance(value, list):
                parts = ours.setdefault("parts", [])
                if isinstance(parts, list):
                    for part in value:
                        _merge_part(parts, part, cap)
        elif value is not None:
            ours[key] = value


class GeminiCore(_ChunkCore):
    """Gemini accumulator core (pure Python)."""

    __slots__ = ()
    _LABEL = "gemini"
    _OUTPUT = "candidates"
    _DONE_MARKER = False
    _UPDATED = _GEMINI_UPDATED
    _typed = staticmethod(_typed_gemini)

    def _add_entry(self, fields: dict) -> None:
        index = _index_of(fields)
        candidate = self._entry(index, lambda: {"content": {}, "index": index})
        content = fields.pop("content", None)
        for key, value in fields.items():
            if key != "index" and value is not None:
                candidate[key] = value
        ours = candidate.get("content")
        if isinstance(content, dict) and isinstance(ours, dict):
            _merge_content(ours, content, self._cap)
