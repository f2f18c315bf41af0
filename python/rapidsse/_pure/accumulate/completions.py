"""The Completions accumulator core: the twin of ``rust/src/accumulate/completions.rs`` (whose
module docs give the rules)."""

from __future__ import annotations

from .mod import _ChunkCore, _append_text, _index_of, _typed_reader


_typed_completions = _typed_reader(
    frozenset(["object"]), frozenset(["choices", "usage", "system_fingerprint", "error"])
)
_LOGPROB_LISTS = frozenset(["tokens", "token_logprobs", "top_logprobs", "text_offset"])


def _merge_logprobs(ours: dict, new: dict) -> None:
    for key, value in new.items():
        is_list = key in _LOGPROB_LISTS
        if value is None:
            continue
        if is_list:
            if isinstance(value, list) and value:
                current = ours.get(key)
                if isinstance(current, list):
                    current.extend(value)
                else:
                    ours[key] = value
        else:
            ours[key] = value


class CompletionsCore(_ChunkCore):
    """Completions accumulator core (pure Python)."""

    __slots__ = ()
    _LABEL = "completions"
    _OUTPUT = "choices"
    _OBJECT = "text_completion"
    _TOP_OBJECT = "text_completion"
    _DEFAULTS = (("id", ""), ("created", 0), ("model", ""))
    _UPDATED = ("usage", "system_fingerprint")
    _typed = staticmethod(_typed_completions)

    def _add_entry(self, fields: dict) -> None:
        index = _index_of(fields)
        choice = self._entry(index, lambda: {"index": index, "text": "", "logprobs": None, "finish_reason": None})
        for key, value in fields.items():
            if key == "index" or value is None:
                continue
            if key == "text":
                if type(value) is str:
                    _append_text(choice, "text", value, self._cap)
            elif key == "logprobs":
                if isinstance(value, dict):
                    ours = choice.get("logprobs")
                    if isinstance(ours, dict):
                        _merge_logprobs(ours, value)
                    else:
                        choice["logprobs"] = value
            elif key == "finish_reason" and type(value) is str and value == "":
                continue
            else:
                choice[key] = value
