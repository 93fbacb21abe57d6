"""The `invoke_parameters` grammar's engine: calls as `invoke`/`parameter` XML elements, the tag
strings table terminals (`detok.parsing.family_tables`: MiniMax M2 / M3, DeepSeek V3.2 / V4's DSML).

    START
    <invoke name="NAME">
    <parameter name="P">value</parameter>
    </invoke>
    END

DSML writes each tag with `｜DSML｜` after its `<` or `</`, and a parameter's `string="true"` (a raw
string) or `string="false"` (JSON). Values are typed by the request's schema as qwen3_coder's are (as
vLLM's DSML engine, a schema type wins over the attribute); a parameter the schema does not type is
a string, or with `string="false"` its JSON (the text where it is not JSON). The edges are
xml_parameters': its engine runs this grammar with these tags. The differences: a name may be quoted
or bare (MiniMax's template quotes it; vLLM's minimax_m2 takes either), and an `invoke` tag outside
the region is text (vLLM's parsers look for calls only inside it).
"""

from __future__ import annotations

import re

from typing import ClassVar

from detok.parsing.tools.xml_parameters import XmlParametersToolParser

# a tag's text up to its `>`: a quoted or bare name, then maybe a `string` attribute
_HEADER = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|([^\s"']+))\s*(?:string\s*=\s*"(true|false)")?\s*""")


# XTML's (Kimi K3) attributes: `"NAME" key="value" ...` up to the tag's `<|sep|>` (its `>` ends the
# header), values escaped `&quot;` / `&amp;`
XTML_HEADER_END = "<|sep|"
_XTML_NAME = re.compile(r'\s*"([^"]*)"')
_XTML_TYPE = re.compile(r'\stype="([^"]*)"')


def xtml_header(text: str) -> tuple[str, str | None]:
    """An XTML tag's text after `tool=` / `key=`: the name, and "true" (a raw string: `type="string"`
    or no type, as vLLM's kimi_k3) or "false" (JSON)."""
    m = _XTML_NAME.match(text)
    if m is None or not text.endswith(XTML_HEADER_END):
        return text.strip(), None  # (then not a name)
    kind = _XTML_TYPE.search(text, m.end())
    string = kind is None or kind.group(1) == "string"
    return m.group(1).replace("&quot;", '"').replace("&amp;", "&"), "true" if string else "false"


def tags(prefix: str) -> tuple[str, str, str, str]:
    """The invoke and parameter tags with `prefix` after each `<` / `</` (DSML's `｜DSML｜`)."""
    return f"<{prefix}invoke name=", f"</{prefix}invoke>", f"<{prefix}parameter name=", f"</{prefix}parameter>"


class InvokeParametersToolParser(XmlParametersToolParser):
    function, function_end, parameter, parameter_end = tags("")
    bare_calls = False
    # a table's: the tags' attributes as XTML's (Kimi K3), and terminals dropped from the content
    # (K3's response-channel wrapper, which vLLM's kimi_k3 unwraps)
    xtml: ClassVar[bool] = False
    content_drops: ClassVar[tuple[str, ...]] = ()

    def _on_marker(self, marker: str) -> None:
        if marker in self.content_drops and self._state == 0:  # (0: in content)
            return
        super()._on_marker(marker)

    def _header(self, text: str) -> tuple[str, str | None]:
        if self.xtml:
            return xtml_header(text)
        m = _HEADER.fullmatch(text)
        if m is None:  # not a name and attributes: the text itself (a function's is then not a name)
            return text.strip(), None
        name = next(g for g in m.group(1, 2, 3) if g is not None)
        return name, m.group(4)
