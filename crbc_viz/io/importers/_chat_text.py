"""Messages of a conversation a trainer logged as chat-templated text (decoded token ids).

Two templates are recognised by their markers: ChatML (Qwen: ``<|im_start|>role\\n ...
<|im_end|>``) and Llama 3 (``<|start_header_id|>role<|end_header_id|>\\n\\n ... <|eot_id|>``).
Other text is not split (the caller says so).
"""

from __future__ import annotations

import re

__all__ = ["ENV_ROLES", "last_env_message", "model_part", "template_of"]

#: Roles whose message comes from the environment (the user, a tool, an observation).
ENV_ROLES = frozenset({"user", "tool", "observation", "ipython", "environment", "function"})

_TEMPLATES = {
    "chatml": (
        re.compile(r"<\|im_start\|>([^\n<]*)\n(.*?)(?:<\|im_end\|>|(?=<\|im_start\|>)|\Z)", re.S),
        ("<|im_end|>", "<|im_start|>"),
    ),
    "llama3": (
        re.compile(
            r"<\|start_header_id\|>(.*?)<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>|(?=<\|start_header_id\|>)|\Z)",
            re.S,
        ),
        ("<|eot_id|>", "<|start_header_id|>"),
    ),
}


def template_of(text: str) -> str | None:
    """``chatml``, ``llama3`` or None: the template whose markers ``text`` holds."""
    if not isinstance(text, str):
        return None
    for name, (_, (_end, start)) in _TEMPLATES.items():
        if start in text:
            return name
    return None


def last_env_message(text: str) -> str | None:
    """The content of the last user / tool / observation message of templated ``text``; None
    when the template is not recognised or no such message is in it."""
    name = template_of(text)
    if name is None:
        return None
    found = None
    for role, content in _TEMPLATES[name][0].findall(text):
        if role.strip().lower() in ENV_ROLES:
            found = content
    return found


def model_part(text: str, template: str | None) -> str | None:
    """The model's own text at the start of a templated response (up to its end-of-turn
    marker, or to the next message's header); None when ``template`` is not recognised."""
    if template not in _TEMPLATES or not isinstance(text, str):
        return None
    end, start = _TEMPLATES[template][1]
    cut = min((i for i in (text.find(end), text.find(start)) if i >= 0), default=len(text))
    part = text[:cut]
    if cut < len(text) and text.startswith(start, cut) and part.endswith("\n"):
        part = part[:-1]  # the newline the template writes before the next header
    return part
